use std::sync::Arc;

use limits::{ManualClock, Permit, Waiter};

use super::Limiter;
use crate::{Options, Shaped};

struct W;

impl Waiter for W {
    fn admit(self, permit: Permit<Self>) -> Result<(), Permit<Self>> {
        Err(permit)
    }
}

fn build(args: &[&str]) -> Arc<Limiter<W, Arc<ManualClock>>> {
    let o = Options::parse("http://a/", args).unwrap();
    Limiter::for_options(&o, Arc::new(ManualClock::new(1)))
}

#[test]
fn each_shape_comes_from_its_options() {
    let shape = |args: &[&str]| match build(args).shaped() {
        Shaped::Rule(_) => "rule",
        Shaped::Fair(_) => "fair",
        Shaped::Keyed(k) if k.is_peered() => "peered",
        Shaped::Keyed(_) => "keyed",
    };
    assert_eq!(shape(&["--limit=2"]), "rule");
    assert_eq!(shape(&["--limit=2", "--fair=ip"]), "fair");
    assert_eq!(shape(&["--rate=5", "--key=ip"]), "keyed");
    assert_eq!(
        shape(&[
            "--rate=5",
            "--key=ip",
            "--store=redis://127.0.0.1:6380",
            "--store-sync=100"
        ]),
        "peered",
        "--store-sync exchanges counts as peers do"
    );
}

#[test]
fn count_status_charges_on_the_response() {
    assert!(!build(&["--rate=5"]).charges_on_response());
    assert!(build(&["--rate=5", "--count-status=429"]).charges_on_response());
}
