"""Validates real outputs of baton against the schemas of schemas/ (tests/schemas.rs).

Usage: schemas_check.py SCHEMAS_DIR SAMPLES_JSON
SAMPLES_JSON is a list of {"schema": NAME, "label": TEXT, "instance": VALUE,
"valid": BOOL}. For each sample it checks that schemas/NAME.json is a valid
JSON Schema (2020-12) and that it accepts the instance (or refuses it, for
"valid": false). For an accepted instance it also checks that:
- the schema describes every field the instance has, at every depth (the
  schema with "additionalProperties": false added to each object accepts it);
- the schema can fail: the instance without one of its required fields, or
  with a field of the wrong type, is refused.
Prints {"checked", "mutations", "errors"} as JSON.
"""

import copy
import json
import pathlib
import sys

from jsonschema import Draft202012Validator

WRONG = [12345, "x", True, [], {}]
TYPES = {int: {"integer", "number"}, str: {"string"}, bool: {"boolean"},
         list: {"array"}, dict: {"object"}}


def strict(s):
    """The schema, forbidding the fields it does not describe."""
    if isinstance(s, dict):
        s = {k: strict(v) for k, v in s.items()}
        if "properties" in s and "additionalProperties" not in s:
            s["additionalProperties"] = False
        return s
    if isinstance(s, list):
        return [strict(v) for v in s]
    return s


def root_object(schema):
    """The schema of the root object: of each element of a root array, or of
    the object of a root that may also be null."""
    if schema.get("type") == "array":
        ref = schema["items"]["$ref"]
    elif "anyOf" in schema:
        ref = next(a["$ref"] for a in schema["anyOf"] if "$ref" in a)
    else:
        return schema
    return schema["$defs"][ref.removeprefix("#/$defs/")]


def mutants(schema, instance):
    """Broken copies of the instance, each with what was broken."""
    obj = instance[0] if isinstance(instance, list) else instance
    if not isinstance(obj, dict):
        return
    root = root_object(schema)

    def wrap(o):
        if isinstance(instance, list):
            return [o] + copy.deepcopy(instance[1:])
        return o

    for key in root.get("required", []):
        m = copy.deepcopy(obj)
        m.pop(key, None)
        yield f"without {key}", wrap(m)
    for key, prop in root.get("properties", {}).items():
        types = prop.get("type")
        if types is None or key not in obj:
            continue
        types = {types} if isinstance(types, str) else set(types)
        wrong = next(w for w in WRONG if not TYPES[type(w)] & types)
        m = copy.deepcopy(obj)
        m[key] = wrong
        yield f"{key} = {json.dumps(wrong)}", wrap(m)


def main():
    schemas_dir = pathlib.Path(sys.argv[1])
    samples = json.loads(pathlib.Path(sys.argv[2]).read_text())
    errors, checked, mutations = [], 0, 0
    for s in samples:
        name, label, instance = s["schema"], s["label"], s["instance"]
        schema = json.loads((schemas_dir / f"{name}.json").read_text())
        Draft202012Validator.check_schema(schema)
        found = sorted(Draft202012Validator(schema).iter_errors(instance), key=str)
        checked += 1
        if not s["valid"]:
            if not found:
                errors.append(f"{name} ({label}): accepted what baton refuses: {instance}")
            continue
        if found:
            e = found[0]
            errors.append(f"{name} ({label}): {e.message} at {list(e.absolute_path)}")
            continue
        loose = sorted(Draft202012Validator(strict(schema)).iter_errors(instance), key=str)
        if loose:
            e = loose[0]
            errors.append(f"{name} ({label}): a field the schema does not describe: "
                          f"{e.message} at {list(e.absolute_path)}")
        for what, broken in mutants(schema, instance):
            mutations += 1
            if Draft202012Validator(schema).is_valid(broken):
                errors.append(f"{name} ({label}): too loose, accepts the output {what}")
    print(json.dumps({"checked": checked, "mutations": mutations, "errors": errors}))


main()
