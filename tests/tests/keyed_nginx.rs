//! rate_limit.so `--key=ip` side by side with nginx `limit_req` on the same
//! traffic: several client addresses, each sending bursts to both servers,
//! request by request, and the same number admitted per address (±1).
//!
//! # The mapping
//! nginx's `limit_req zone=z burst=B nodelay` with `rate=Rr/s` keeps, per
//! key, an `excess` in thousandths of a request: a request adds 1, time
//! takes away `R` per second (at ms granularity), and a request is refused
//! (without changing the state) if its `excess` would exceed `B`. A fresh or
//! idle key therefore admits **B + 1** requests at once, then one every
//! 1/R s: a GCRA with emission interval 1/R and tolerance B/R. Our `--rate=R
//! --burst=b` is that GCRA with tolerance (b - 1)/R (the bucket holds b), and
//! a refused request does not spend a token either. So:
//!
//! | nginx                                      | rate_limit.so                          |
//! |--------------------------------------------|----------------------------------------|
//! | `rate=Rr/s`                                | `--rate=R`                             |
//! | `burst=B` (default 0)                      | `--burst=B+1`                          |
//! | `nodelay` (or `burst=0`: nothing to delay) | `--queue=0` (refuse at once)           |
//! | `$binary_remote_addr`                      | `--key=ip --key-prefix=32/128`         |
//! | `limit_req_status 429`                     | `--error=429` (the default)            |
//!
//! # Why it does not flake
//! Each request goes to nginx and to traffic_server back to back (the order
//! alternating), so both see the same elapsed time up to a millisecond or
//! two; a refill can only fall in that gap at the end of a burst, and then
//! it shifts one admission. Bursts start at fixed times 600 ms apart, so a
//! slow machine only stretches them, for both servers alike.

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use ats_tests::client::Conn;
use ats_tests::nginx::Nginx;
use ats_tests::{Origin, TrafficServer};

/// One rule on both sides: its host, nginx rate and burst, and how many
/// requests each client address sends per round.
struct Zone {
    host: &'static str,
    rate: u32,
    burst: u32,
    sends: [usize; 4],
}

const ZONES: [Zone; 3] = [
    // Burst and nodelay; full again after 300 ms.
    Zone {
        host: "a.test",
        rate: 10,
        burst: 2,
        sends: [1, 3, 4, 10],
    },
    // A larger burst refilling slower (2.4 tokens between rounds): the rate.
    Zone {
        host: "b.test",
        rate: 4,
        burst: 5,
        sends: [2, 6, 7, 12],
    },
    // No burst: one at a time.
    Zone {
        host: "c.test",
        rate: 5,
        burst: 0,
        sends: [1, 2, 3, 6],
    },
];

const CLIENTS: [u8; 4] = [2, 3, 4, 5];
const ROUNDS: usize = 4;
/// b.test refills 2.4 tokens a period: its flooding clients' refills fall
/// 0.2 token or more (50 ms) away from the bursts' starts in every round.
const PERIOD: Duration = Duration::from_millis(600);

fn nginx_http() -> String {
    let mut http = String::from("limit_req_status 429;\n");
    for z in &ZONES {
        let name = &z.host[..1];
        // nginx refuses an explicit `burst=0`: no burst is written as none.
        let burst = match z.burst {
            0 => String::new(),
            b => format!(" burst={b} nodelay"),
        };
        http.push_str(&format!(
            "limit_req_zone $binary_remote_addr zone={name}:1m rate={}r/s;\n\
             server {{ {{listen}} server_name {}; location / {{ limit_req zone={name}{burst}; }} }}\n",
            z.rate, z.host
        ));
    }
    http
}

fn ats_remap(origin: &Origin) -> String {
    ZONES
        .iter()
        .map(|z| {
            let params = format!(
                "--rate={} --burst={} --queue=0 --key=ip --key-prefix=32/128",
                z.rate,
                z.burst + 1
            );
            ats_tests::rule("rate_limit", z.host, origin, &params)
        })
        .collect()
}

/// Admitted (200) or refused (429); anything else fails the test.
fn admitted(c: &mut Conn, server: &str, host: &str) -> usize {
    let status = c
        .get(host, "/ok", &[])
        .unwrap_or_else(|e| panic!("{server} {host}: {e}"))
        .status;
    assert!(
        status == 200 || status == 429,
        "{server} {host}: HTTP {status}"
    );
    usize::from(status == 200)
}

#[test]
fn admits_per_address_as_nginx_limit_req() {
    let nginx = Nginx::start(&nginx_http()).expect("nginx");
    let origin = Origin::start();
    let ts = TrafficServer::builder()
        .remap(ats_remap(&origin))
        .start()
        .expect("start");
    let mut conns: Vec<(Conn, Conn)> = CLIENTS
        .iter()
        .map(|&last| {
            let src = Ipv4Addr::new(127, 0, 0, last);
            (
                Conn::open_from(nginx.port(), src).expect("nginx connect"),
                Conn::open_from(ts.port(), src).expect("ats connect"),
            )
        })
        .collect();
    let counts = send_rounds(&mut conns);
    let table: String = ZONES
        .iter()
        .enumerate()
        .flat_map(|(z, zone)| {
            let counts = &counts;
            CLIENTS.iter().enumerate().map(move |(c, last)| {
                format!(
                    "{} 127.0.0.{last} sends {}/round: (nginx, ours) per round {:?}\n",
                    zone.host, zone.sends[c], counts[z][c]
                )
            })
        })
        .collect();
    eprintln!("{table}");
    for (z, zone) in ZONES.iter().enumerate() {
        for (c, last) in CLIENTS.iter().enumerate() {
            let cells = &counts[z][c];
            let (n, o) = cells.iter().fold((0, 0), |(n, o), &(a, b)| (n + a, o + b));
            assert!(
                n.abs_diff(o) <= 1,
                "{} 127.0.0.{last}: nginx admitted {n}, rate_limit {o}\n{table}",
                zone.host
            );
            for (round, &(n, o)) in cells.iter().enumerate() {
                assert!(
                    n.abs_diff(o) <= 1,
                    "{} 127.0.0.{last} round {round}: nginx {n}, rate_limit {o}\n{table}",
                    zone.host
                );
            }
        }
    }
    // What reached the origin is what rate_limit admitted.
    let ours: usize = counts.iter().flatten().flatten().map(|&(_, o)| o).sum();
    assert_eq!(origin.count(), ours);
}

/// Sends every round's bursts through both servers; returns
/// `counts[zone][client][round] = (admitted by nginx, admitted by ours)`.
fn send_rounds(conns: &mut [(Conn, Conn)]) -> Vec<Vec<Vec<(usize, usize)>>> {
    let mut counts = vec![vec![Vec::with_capacity(ROUNDS); CLIENTS.len()]; ZONES.len()];
    let start = Instant::now();
    for round in 0..ROUNDS {
        if let Some(wait) = (start + PERIOD * round as u32).checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        for (c, (to_nginx, to_ats)) in conns.iter_mut().enumerate() {
            for (z, zone) in ZONES.iter().enumerate() {
                let (mut n, mut o) = (0, 0);
                for i in 0..zone.sends[c] {
                    if (round + i) % 2 == 0 {
                        n += admitted(to_nginx, "nginx", zone.host);
                        o += admitted(to_ats, "rate_limit", zone.host);
                    } else {
                        o += admitted(to_ats, "rate_limit", zone.host);
                        n += admitted(to_nginx, "nginx", zone.host);
                    }
                }
                counts[z][c].push((n, o));
            }
        }
    }
    counts
}
