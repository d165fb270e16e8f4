use serde_json::{Value, json};

use super::*;

fn doc() -> Value {
    json!({
        "metadata": {"name": "n", "labels": {"app.kubernetes.io/name": "demo"}},
        "spec": {
            "items": [
                {"name": "a", "size": 1, "ratio": 0.5, "on": true},
                {"name": "b", "size": 5, "ratio": 2.5, "on": false, "extra": null},
                {"name": "c", "size": 10, "ratio": 7.5}
            ],
            "word": "hi",
            "nested": {"name": "deep", "inner": {"name": "deeper"}}
        },
        "status": {"conditions": [
            {"type": "Synced", "status": "False"},
            {"type": "Ready", "status": "True"}
        ]}
    })
}

/// The first part's results, as JSON (bytes and literals as numbers and strings).
fn all(path: &str) -> Option<Vec<Value>> {
    let doc = doc();
    let p = JsonPath::column(path).expect("parses");
    let parts = p.find(&doc)?;
    Some(
        parts
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|f| match f {
                Found::Json(v) => v.clone(),
                Found::Byte(b) => json!(b),
                Found::Text(t) => json!(t),
                Found::Int(i) => json!(i),
                Found::Float(f) => json!(f),
                Found::Bool(b) => json!(b),
            })
            .collect(),
    )
}

fn names(path: &str) -> Vec<String> {
    all(path)
        .expect("evaluates")
        .iter()
        .map(|v| v["name"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn fields_and_quoted_keys() {
    assert_eq!(all(".spec.word"), Some(vec![json!("hi")]));
    assert_eq!(
        all(".metadata.labels['app.kubernetes.io/name']"),
        Some(vec![])
    );
    assert_eq!(
        all(".metadata.labels.app\\.kubernetes\\.io/name"),
        Some(vec![json!("demo")])
    );
    assert_eq!(all(".spec.nope.deeper"), Some(vec![]));
    assert_eq!(all(".spec.items[1].extra"), Some(vec![Value::Null]));
}

#[test]
fn recursive_descent_finds_every_level() {
    assert_eq!(
        all("..name"),
        Some(vec![
            json!("n"),
            json!("a"),
            json!("b"),
            json!("c"),
            json!("deep"),
            json!("deeper")
        ])
    );
    // `..` alone: every value with members or elements (a string has bytes), not leaves.
    let everything = all(".spec.nested..").expect("evaluates");
    assert_eq!(everything.len(), 4, "{everything:?}");
    assert_eq!(everything[0]["name"], "deep");
}

#[test]
fn wildcards_and_slices() {
    assert_eq!(names(".spec.items[*]"), ["a", "b", "c"]);
    assert_eq!(names(".spec.items[0:2]"), ["a", "b"]);
    assert_eq!(names(".spec.items[::2]"), ["a", "c"]);
    assert_eq!(names(".spec.items[-1]"), ["c"]);
    assert_eq!(names(".spec.items[-2:]"), ["b", "c"]);
    assert_eq!(names(".spec.items[0,2]"), ["a", "c"]);
    assert_eq!(
        all(".spec.items[*].size"),
        Some(vec![json!(1), json!(5), json!(10)])
    );
    assert_eq!(
        all(".spec.nested.*"),
        Some(vec![json!({"name": "deeper"}), json!("deep")])
    );
    assert_eq!(all(".spec.word.*"), Some(vec![json!(104), json!(105)]));
    // kube refuses what Python would shorten: an end past the list, a zero step.
    assert_eq!(all(".spec.items[0:4]"), None);
    assert_eq!(all(".spec.items[5]"), None);
    assert_eq!(all(".spec.items[::0]"), None);
    assert_eq!(all(".spec.word[0]"), None);
    assert_eq!(all(".spec.items[1:1]"), Some(vec![]));
}

#[test]
fn filters_compare_as_go_templates_do() {
    assert_eq!(
        all(".status.conditions[?(@.type==\"Ready\")].status"),
        Some(vec![json!("True")])
    );
    assert_eq!(
        all(".status.conditions[?(@.type=='Ready')].status"),
        Some(vec![json!("True")])
    );
    assert_eq!(names(".spec.items[?(@.name!=\"b\")]"), ["a", "c"]);
    assert_eq!(names(".spec.items[?(@.size<5)]"), ["a"]);
    assert_eq!(names(".spec.items[?(@.size>1)]"), ["b", "c"]);
    assert_eq!(names(".spec.items[?(@.size<=5)]"), ["a", "b"]);
    assert_eq!(names(".spec.items[?(@.size >= 5)]"), ["b", "c"]);
    assert_eq!(names(".spec.items[?(@.ratio>1.0)]"), ["b", "c"]);
    assert_eq!(names(".spec.items[?(@.on==true)]"), ["a"]);
    assert_eq!(names(".spec.items[?(@.size==@.size)]"), ["a", "b", "c"]);
    // Existence: a member that is there, even as null.
    assert_eq!(names(".spec.items[?(@.on)]"), ["a", "b"]);
    assert_eq!(names(".spec.items[?(@.extra)]"), ["b"]);
    // An integer against a float, a string against a number: Go's templates refuse.
    assert_eq!(all(".spec.items[?(@.ratio>1)]"), None);
    assert_eq!(all(".spec.items[?(@.name>1)]"), None);
    assert_eq!(all(".spec.items[?(@.on<true)]"), None);
    // Filtering what is not a list is an error; elements without the member are skipped,
    // but a member that is null does not compare.
    assert_eq!(all(".spec.nested[?(@.name==\"deep\")]"), None);
    assert_eq!(names(".spec.items[?(@.ratio==7.5)]"), ["c"]);
    assert_eq!(all(".spec.items[?(@.extra==\"x\")]"), None);
}

#[test]
fn paths_kube_does_not_parse() {
    for bad in [
        ".spec[?(@.a",
        ".spec.items[0",
        ".spec.items[a]",
        ".spec \"open",
        ".spec.items[?(@.a==\"x\")",
        "....x",
        ".spec #",
    ] {
        assert!(JsonPath::column(bad).is_err(), "{bad}");
    }
    assert!(JsonPath::column(".spec.items[?(@.name==\"a)b\")].size").is_ok());
    // The largest index parses (Go's int wraps where the end of its slice is derived).
    assert!(JsonPath::column(".spec.items[9223372036854775807]").is_ok());
    assert!(JsonPath::column(".spec.range").is_ok());
}

#[test]
fn the_first_result_is_the_columns_value() {
    let doc = doc();
    let p = JsonPath::column(".spec.items[*].name").expect("parses");
    assert_eq!(p.first(&doc), Some(Found::Json(&json!("a"))));
    let none = JsonPath::column(".spec.nope").expect("parses");
    assert_eq!(none.first(&doc), None);
    let bare = JsonPath::column(".spec.word range").expect("parses");
    assert_eq!(bare.first(&doc), None, "identifiers are an error");
}
