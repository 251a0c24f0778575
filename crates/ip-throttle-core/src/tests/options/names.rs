//! The options' names: one table, and the unknown-option messages and
//! docs/ip_throttle.md list exactly its names.

use super::*;

/// The options' table is the single source of their names: the unknown-option
/// messages (of a `@pparam` and of a config line) list exactly its names,
/// each name is known to both, and no name is there twice.
#[test]
fn the_table_is_the_single_source_of_names() {
    let tables = crate::options::tables();
    assert_eq!(optspec::duplicates(&tables), Vec::<&str>::new());
    let names: Vec<String> = optspec::names(&tables).map(|n| format!("--{n}")).collect();
    let e = parse(&["--bogus"]).unwrap_err();
    let listed = e
        .strip_prefix("unknown option '--bogus'; known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    let files = MemFiles::of(&[("/etc/ts/t.conf", "bogus = 1\n")]);
    let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files).unwrap_err();
    let listed = e
        .strip_prefix("unknown option 'bogus = 1' (at /etc/ts/t.conf:1); known options: ")
        .expect(&e);
    assert_eq!(listed.split(", ").collect::<Vec<_>>(), names);
    for name in optspec::names(&tables) {
        let e = parse(&[&format!("--{name}=")]).err().unwrap_or_default();
        assert!(!e.starts_with("unknown option"), "--{name}: {e}");
        let files = MemFiles::of(&[("/etc/ts/t.conf", &format!("{name} =\n"))]);
        let e = Options::parse(&["--config=t.conf"], Path::new("/etc/ts"), &files)
            .err()
            .unwrap_or_default();
        assert!(!e.starts_with("unknown option"), "{name} in a file: {e}");
    }
}

/// The option table of docs/ip_throttle.md lists exactly the table's names,
/// and every option has a docs line.
#[test]
fn the_docs_list_exactly_the_tables_names() {
    let md = include_str!("../../../../../docs/ip_throttle.md");
    // A cell is `--name` or `--name=VALUE`.
    let mut documented: Vec<&str> = optspec::documented(md, "Options", "--")
        .expect("an Options section")
        .into_iter()
        .filter_map(|cell| cell.split('=').next())
        .collect();
    let tables = crate::options::tables();
    let mut known: Vec<&str> = optspec::names(&tables).collect();
    documented.sort_unstable();
    known.sort_unstable();
    assert_eq!(documented, known);
}
