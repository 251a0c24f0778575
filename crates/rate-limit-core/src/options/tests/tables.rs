//! The option tables are the single source of the options' names: of the
//! unknown-option message, the docs' table and `limiter_options`.

use super::*;

/// Each module's table is the single source of its names: no name is
/// in two tables, and the unknown-option message lists exactly them.
#[test]
fn the_tables_are_the_single_source_of_names() {
    assert_eq!(optspec::duplicates(&tables()), Vec::<&str>::new());
    let names: Vec<String> = all_options()
        .iter()
        .map(|(n, _)| format!("--{n}"))
        .collect();
    let e = err(&["--bogus"]);
    let listed = e
        .strip_prefix("unknown option '--bogus'; known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    for (name, _) in all_options() {
        assert!(
            !parse(&[&format!("--{name}=")]).is_err_and(|e| e.0.starts_with("unknown option")),
            "--{name}"
        );
    }
}

/// The option table of docs/rate_limit.md lists exactly the tables'
/// names, in the order the unknown-option message lists them (the tables'
/// order): an option added to one and not the other, or moved in one,
/// fails here, so the message's order changes only with the docs.
#[test]
fn the_docs_list_exactly_the_tables_names_in_their_order() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rate_limit.md");
    let md = std::fs::read_to_string(path).expect("docs/rate_limit.md");
    let documented =
        optspec::documented_in_order(&md, "Options", "--").expect("an Options section");
    let known: Vec<&str> = all_options().iter().map(|(n, _)| *n).collect();
    assert_eq!(documented, known);
    let docs = (args::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::peering::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::store::OPTIONS.iter().map(|o| o.doc))
        .chain(crate::fair::OPTIONS.iter().map(|o| o.doc))
        .chain(args::ROLLOUT.iter().map(|o| o.doc));
    assert_eq!(docs.filter(|d| d.is_empty()).count(), 0);
}

/// The table numbers the parser dispatches on name the tables they say.
#[test]
fn the_table_numbers_match_the_tables() {
    let t = tables();
    let first = |i: usize| t[i].name(0);
    assert_eq!(first(RULE), args::OPTIONS[0].name);
    assert_eq!(first(PEERS), crate::peering::OPTIONS[0].name);
    assert_eq!(first(STORE), crate::store::OPTIONS[0].name);
    assert_eq!(first(FAIR), crate::fair::OPTIONS[0].name);
    assert_eq!(first(ROLLOUT_TABLE), args::ROLLOUT[0].name);
    assert_eq!(t.len(), 5);
}

/// What groups compare and `show` reports names options the tables know
/// (`peers`, `store` and `fair` stand for their modules' options).
#[test]
fn the_limiter_options_are_named_as_the_tables_name_them() {
    let known: Vec<&str> = all_options().iter().map(|(n, _)| *n).collect();
    for (name, _) in parse(&[]).unwrap().limiter_options() {
        assert!(known.contains(&name), "--{name} is in no table");
    }
}
