use super::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn never_panics(opts in proptest::collection::vec(".{0,40}", 0..6)) {
        let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
        let _ = run(&refs, &Mem::default());
    }

    #[test]
    fn valid_params_round_trip(
        max in any::<u32>(),
        stale in any::<u32>(),
        freq in prop_oneof![Just(0u32), MIN_STATFREQ_MS..=u32::MAX],
        id in "[A-Za-z0-9._/][A-Za-z0-9._/-]{0,29}",
        eq in any::<bool>(),
    ) {
        let sep = if eq { "=" } else { ":" };
        let opts = [
            format!("max{sep}{max}"),
            format!("stale{sep}{stale}"),
            format!("statfreq{sep}{freq}"),
            format!("id{sep}{id}"),
        ];
        let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
        let p = run(&refs, &Mem::default()).expect("valid");
        prop_assert_eq!(p, Params { max, auto: None, stale, statfreq_ms: freq, id: Some(id) });
    }

    #[test]
    fn same_params_from_a_file(max in any::<u32>(), stale in any::<u32>(), name in "[a-z ]{1,12}[a-z]") {
        let text = format!("# generated\nmax:{max}\n\nstale:{stale}\n");
        let mem = Mem::default().with(&format!("/etc/ts/{name}"), &text);
        let opt = format!("file:{}", escape_path(&name));
        let p = run(&[&opt], &mem).expect("valid");
        prop_assert_eq!((p.max, p.stale), (max, stale));
    }

    #[test]
    fn escape_round_trips(name in "[^\\x00]{1,30}") {
        prop_assert_eq!(unescape_path(&escape_path(&name)).expect("valid"), name);
    }

    #[test]
    fn non_numbers_are_refused_naming_the_value(v in "[^0-9]{1,8}|[0-9]{0,3}[^0-9\\s\"']+[0-9]{0,3}") {
        let opt = format!("max:{v}");
        let e = run(&[&opt], &Mem::default()).expect_err("invalid");
        let v = unquote(v.trim());
        prop_assert!(v.is_empty() || e.contains(&quote(v)), "{}", e);
    }

    /// Whatever the input, an error is printable and short, and a
    /// refused value is named after its parameter.
    #[test]
    fn errors_are_printable_short_and_name_the_parameter_first(
        name in prop_oneof![Just("max"), Just("stale"), Just("statfreq"), Just("id"), Just("file")],
        value in proptest::collection::vec(any::<char>(), 1..400),
        in_file in any::<bool>(),
    ) {
        let value: String = value.into_iter().collect();
        let item = format!("{name}:{value}");
        let mem = Mem::default().with("/etc/ts/f", &format!("{item}\n"));
        let opts = if in_file { ["max:1", "file:f"] } else { ["max:1", item.as_str()] };
        if let Err(e) = run(&opts, &mem) {
            prop_assert!(!e.chars().any(char::is_control), "{:?}", e);
            prop_assert!(e.len() < 1000, "{:?}", e);
            prop_assert!(
                e.starts_with(&format!("parameter '{name}' has an "))
                    || e.starts_with("expected name:value")
                    || e.starts_with("unknown parameter"),
                "{:?}", e
            );
        }
    }

    #[test]
    fn default_ids_are_valid(url in ".{0,300}") {
        prop_assert!(validate_id(&default_id(&url)).is_ok());
    }
}
