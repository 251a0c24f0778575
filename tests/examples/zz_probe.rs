use ats_tests::capacity_origin::CapacityOrigin;
use ats_tests::closed_loop::ClosedLoop;
use ats_tests::TrafficServer;
use std::thread;
use std::time::Duration;
fn main() {
    let origin = CapacityOrigin::start(8, Duration::from_millis(50));
    let map = format!(
        "map http://a.test/ {} @plugin={} @pparam=max:auto @pparam=id:x\n",
        origin.url(),
        ats_tests::plugin("throttle")
    );
    let ts = TrafficServer::builder()
        .remap(map)
        .with_manager()
        .start()
        .expect("start");
    let load = ClosedLoop::start(ts.port(), "a.test", 40, Duration::from_millis(10), true);
    let mut last = 0;
    for _ in 0..30 {
        thread::sleep(Duration::from_secs(1));
        let s = ts.plugin_msg("throttle", "show x");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        let r = &v["rules"][0];
        let a = origin.answered();
        println!(
            "max {} inflight {} base {} recent {} probing {} answered/s {}",
            r["max"],
            r["inflight"],
            r["auto"]["rtt_baseline_ms"],
            r["auto"]["rtt_recent_ms"],
            r["auto"]["probing"],
            a - last
        );
        last = a;
    }
    let n = load.stop();
    println!("{n:?}");
}
