//! `max:auto` and its bounds (issue 34).

use super::*;

fn bounds(p: &Params) -> Option<(u32, u32)> {
    p.auto.map(|b| (b.min, b.max))
}

#[test]
fn auto_learns_within_default_or_given_bounds() {
    let p = ok(&["max:auto"]);
    assert_eq!((p.max, bounds(&p)), (20, Some((4, 1000))));
    let p = ok(&["max:auto", "max-min:2", "max-max:10"]);
    assert_eq!((p.max, bounds(&p)), (10, Some((2, 10))), "starts within");
    let p = ok(&["max:auto", "max-min:50"]);
    assert_eq!((p.max, bounds(&p)), (50, Some((50, 1000))));
    let p = ok(&["max:auto", "max-max:3"]);
    assert_eq!((p.max, bounds(&p)), (3, Some((3, 3))), "min moves down");
    let p = ok(&["max:auto", "max-min:5000"]);
    assert_eq!(bounds(&p), Some((5000, 5000)), "max moves up");
    let p = ok(&["max:'auto'", "max-max:1000000"]);
    assert_eq!(bounds(&p), Some((4, 1_000_000)));
}

#[test]
fn a_later_max_overrides_auto_and_back() {
    let mem = Mem::default().with("/etc/ts/base.config", "max:auto\nmax-max:64\n");
    let p = run(&["file:base.config"], &mem).expect("valid");
    assert_eq!(bounds(&p), Some((4, 64)));
    let e = err(&["file:base.config", "max:10"], &mem);
    assert_eq!(
        e,
        "parameter 'max-max' needs max:auto (it bounds the learned max; this rule's max is 10)"
    );
    let p = run(&["max:10", "file:base.config"], &mem).expect("valid");
    assert_eq!(bounds(&p), Some((4, 64)));
}

#[test]
fn bad_bounds_name_the_parameter_and_value() {
    let mem = Mem::default();
    for (opts, want) in [
        (
            &["max:5", "max-min:2"][..],
            "parameter 'max-min' needs max:auto (it bounds the learned max; this rule's max is 5)",
        ),
        (
            &["max:auto", "max-min:0"],
            "parameter 'max-min' has an invalid value '0' at @pparam=max-min:0: expected a \
             whole number from 1 to 1000000",
        ),
        (
            &["max:auto", "max-max:1000001"],
            "parameter 'max-max' has an invalid value '1000001' at @pparam=max-max:1000001: \
             expected a whole number from 1 to 1000000",
        ),
        (
            &["max:auto", "max-max:x"],
            "parameter 'max-max' has an invalid value 'x' at @pparam=max-max:x: not a whole number",
        ),
        (
            &["max:auto", "max-min:20", "max-max:10"],
            "parameter 'max-min' (20) is above 'max-max' (10): the lowest learned max must not \
             exceed the highest",
        ),
        (
            &["max:automatic"],
            "parameter 'max' has an invalid value 'automatic' at @pparam=max:automatic: not a \
             whole number; expected auto or a whole number from 0",
        ),
    ] {
        let e = err(opts, &mem);
        assert!(e.starts_with(want), "{opts:?}:\n{e}\nwant {want}");
    }
}
