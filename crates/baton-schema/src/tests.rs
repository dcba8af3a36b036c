#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use super::*;
use baton_contract::json;

fn output(name: &str) -> &'static Output {
    OUTPUTS.iter().find(|o| o.name == name).unwrap()
}

#[test]
fn the_checked_in_schemas_are_what_the_types_generate() {
    let problems = stale(&schemas_dir());
    assert!(
        problems.is_empty(),
        "schemas/ is stale; run `cargo run -p baton-schema`:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_schema_describes_exactly_its_contracts_fields() {
    let problems: Vec<String> = OUTPUTS.iter().flat_map(contract_mismatches).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_json_output_of_the_contract_has_a_schema() {
    let covered: BTreeSet<&str> = OUTPUTS
        .iter()
        .flat_map(|o| {
            std::iter::once((o.shape)().command).chain(o.nested.iter().map(|(_, s, _)| s().command))
        })
        .collect();
    for shape in json::ALL {
        assert!(
            covered.contains(shape.command),
            "`baton {} --json` has no schema in baton::schema::OUTPUTS",
            shape.command
        );
    }
}

#[test]
fn enumerations_are_the_contracts() {
    let quoted = |values: &[&str]| -> BTreeSet<String> {
        values.iter().map(|v| format!("\"{v}\"")).collect()
    };
    let def = |o: &str, pointer: &str| enum_values(output(o).schema().pointer(pointer).unwrap());
    assert_eq!(
        def("lock-status", "/$defs/Liveness"),
        quoted(json::LIVENESS)
    );
    assert_eq!(def("job", "/$defs/JobStatus"), quoted(json::JOB_STATUSES));
    assert_eq!(
        def("doctor", "/$defs/Check/properties/name"),
        quoted(json::DOCTOR_CHECKS)
    );
    let mut rules = quoted(json::DIR_RULES);
    rules.insert("null".into());
    assert_eq!(def("doctor", "/properties/rule"), rules);
}

/// Every description of an object's field, by path.
fn undescribed(v: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (name, field) in props {
            let d = field.get("description").and_then(Value::as_str);
            if d.is_none_or(|d| d.trim().is_empty()) {
                out.push(format!("{at}.{name}"));
            }
        }
    }
    if let Some(defs) = v.get("$defs").and_then(Value::as_object) {
        for (name, def) in defs {
            undescribed(def, name, out);
        }
    }
}

#[test]
fn every_schema_has_its_id_a_title_and_a_description_of_every_field() {
    let mut ids = BTreeSet::new();
    for o in OUTPUTS {
        let s = o.schema();
        let id = s["$id"].as_str().unwrap();
        assert_eq!(id, format!("urn:baton:schema:{}:v{}", o.name, o.version));
        assert!(ids.insert(id.to_string()), "{id} twice");
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert!(!s["title"].as_str().unwrap().is_empty());
        assert!(!s["description"].as_str().unwrap().is_empty(), "{}", o.name);
        let mut missing = Vec::new();
        undescribed(&s, o.name, &mut missing);
        assert!(
            missing.is_empty(),
            "fields without a doc comment: {missing:?}"
        );
    }
}

#[test]
fn output_schemas_let_readers_ignore_added_fields() {
    // The stability rule adds fields without a new version: a schema that
    // forbade unknown fields would reject the output of a newer baton.
    for o in OUTPUTS.iter().filter(|o| !o.request) {
        let text = o.schema().to_string();
        assert!(
            !text.contains("\"additionalProperties\":false"),
            "{} forbids added fields",
            o.name
        );
    }
    // A request body is refused with unknown fields, and says so.
    let submit = output("submit-request").schema();
    assert_eq!(submit["additionalProperties"], false);
}

#[test]
fn the_job_api_schemas_match_the_openapi_document() {
    // Both are generated from the same types (the document by baton-serve's
    // `openapi`, checked in by the CLI's `serve_openapi` test): this holds
    // the two generators to the same contract.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/openapi.json");
    let openapi: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    for (component, name) in [
        ("JobView", "job"),
        ("JobList", "job-list"),
        ("Queued", "job-submitted"),
        ("ErrorBody", "error"),
        ("SubmitRequest", "submit-request"),
    ] {
        let theirs = openapi
            .pointer(&format!("/components/schemas/{component}"))
            .unwrap();
        let ours = output(name).schema();
        assert_eq!(
            names(theirs.get("properties")),
            names(ours.get("properties")),
            "{component} of openapi.json and schemas/{name}.json"
        );
        // The OpenAPI document may require fewer (it leaves out fields that
        // are always there but may be null), never more.
        let (theirs, ours) = (names(theirs.get("required")), names(ours.get("required")));
        assert!(
            theirs.is_subset(&ours),
            "openapi.json requires {theirs:?} of {component}, schemas/{name}.json {ours:?}"
        );
    }
}

#[test]
fn breaking_changes_are_told_from_additions() {
    let old = output("lock-status").schema();
    assert!(breaking_changes(&old, &old, false).is_empty());

    let mut added = old.clone();
    added["properties"]["new_field"] = serde_json::json!({"type": "string"});
    added["properties"]["held"]["description"] = "reworded".into();
    assert!(breaking_changes(&old, &added, false).is_empty());

    let mut removed = old.clone();
    removed["properties"]
        .as_object_mut()
        .unwrap()
        .remove("waiters");
    assert_eq!(
        breaking_changes(&old, &removed, false),
        ["the root.waiters: removed"]
    );

    let mut retyped = old.clone();
    retyped["$defs"]["HolderInfo"]["properties"]["pid"]["type"] = "string".into();
    assert_eq!(
        breaking_changes(&old, &retyped, false),
        ["HolderInfo.pid: its type changed"]
    );

    // An output's field that can no longer be null reads as before; one
    // that now can be is new to its readers.
    let mut narrowed = old.clone();
    narrowed["properties"]["mode"]["type"] = "string".into();
    assert!(breaking_changes(&old, &narrowed, false).is_empty());
    assert_eq!(
        breaking_changes(&narrowed, &old, false),
        ["the root.mode: its type changed"]
    );
    // For a request body, the reverse.
    let request = output("submit-request").schema();
    let mut widened = request.clone();
    widened["properties"]["prompt"]["type"] = serde_json::json!(["string", "null"]);
    assert!(breaking_changes(&request, &widened, true).is_empty());
    assert_eq!(
        breaking_changes(&widened, &request, true),
        ["the root.prompt: its type changed"]
    );

    let mut optional = old.clone();
    let required = optional["required"].as_array_mut().unwrap();
    required.retain(|f| f != "name");
    assert_eq!(
        breaking_changes(&old, &optional, false),
        ["the root.name: no longer always present"]
    );

    let mut fewer = old.clone();
    fewer["$defs"]["Liveness"]["oneOf"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v["const"] != "inherited");
    assert_eq!(
        breaking_changes(&old, &fewer, false),
        ["Liveness: the value \"inherited\" is gone"]
    );
}

#[test]
fn a_rewrite_that_breaks_readers_needs_a_new_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    assert_eq!(write(dir).unwrap().len(), OUTPUTS.len());
    assert!(stale(dir).is_empty());
    assert!(write(dir).unwrap().is_empty(), "nothing to rewrite");

    // As if v1 had a field the types no longer have.
    let file = dir.join("git-push.json");
    let mut old: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    old["properties"]["gone"] = serde_json::json!({"type": "string", "description": "x"});
    let text = serde_json::to_string_pretty(&old).unwrap();
    fs::write(&file, &text).unwrap();
    let err = write(dir).unwrap_err();
    assert!(err.contains("git-push: the root.gone: removed"), "{err}");
    assert_eq!(fs::read_to_string(&file).unwrap(), text, "nothing written");
    let why = stale(dir);
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].contains("bump its version"), "{why:?}");

    // Under another version's `$id` (the version was bumped), it is rewritten.
    old["$id"] = "urn:baton:schema:git-push:v0".into();
    fs::write(&file, serde_json::to_string_pretty(&old).unwrap()).unwrap();
    assert_eq!(write(dir).unwrap(), [file]);
    assert!(stale(dir).is_empty());

    fs::write(dir.join("nobody.json"), "{}").unwrap();
    assert_eq!(stale(dir).len(), 1);
}
