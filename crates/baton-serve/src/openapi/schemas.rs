//! The building blocks of the OpenAPI document that the route table
//! (`routes.rs`), the hand-written shapes (`shapes.rs`) and the generator
//! (`generate.rs`) share: the component schemas made from the Rust types,
//! and references and answers in the document's form.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// Where the document keeps its schemas (a JSON pointer).
const SCHEMAS: &str = "/components/schemas";

/// The schemas of the types the document names, as `$ref`s into
/// `components/schemas`: those the service writes (serialized: every field
/// it always sends is required) and those it reads (deserialized: what it
/// takes), each with schemars' contract for that direction.
pub struct Schemas {
    written: SchemaGenerator,
    read: SchemaGenerator,
    /// Schemas written here, for shapes no Rust type has.
    shapes: Map<String, Value>,
}

impl Schemas {
    pub(super) fn new() -> Schemas {
        let settings = || {
            SchemaSettings::draft2020_12().with(|s| {
                s.definitions_path = SCHEMAS.into();
                s.meta_schema = None;
            })
        };
        Schemas {
            written: settings().for_serialize().into_generator(),
            read: settings().for_deserialize().into_generator(),
            shapes: Map::new(),
        }
    }

    /// A reference to the schema of `T` as the service writes it.
    pub fn written<T: JsonSchema>(&mut self) -> Value {
        self.written.subschema_for::<T>().to_value()
    }

    /// A reference to the schema of `T` as the service reads it.
    pub fn read<T: JsonSchema>(&mut self) -> Value {
        self.read.subschema_for::<T>().to_value()
    }

    /// The schema of `T` as the service reads it, inline (for a query's
    /// parameters).
    pub fn read_inline<T: JsonSchema>(&mut self) -> Value {
        T::json_schema(&mut self.read).to_value()
    }

    /// A reference to the schema `name`, written by hand as `schema`: for a
    /// shape built as a JSON value rather than from a type (the
    /// compatibility and OpenAI routes, `/health`).
    pub fn shape(&mut self, name: &str, schema: Value) -> Value {
        self.shapes.insert(name.to_string(), schema);
        reference(name)
    }

    /// Every schema referenced so far, by name.
    ///
    /// # Errors
    ///
    /// Two different schemas under one name.
    pub(super) fn into_components(mut self) -> Result<Map<String, Value>, String> {
        let mut all = self.written.take_definitions(true);
        for (name, schema) in self
            .read
            .take_definitions(true)
            .into_iter()
            .chain(self.shapes)
        {
            match all.get(&name) {
                Some(other) if *other != schema => {
                    return Err(format!(
                        "two schemas named {name} (as written and as read, or a type and a shape)"
                    ))
                }
                _ => {
                    all.insert(name, schema);
                }
            }
        }
        Ok(all)
    }
}

/// A reference to the component schema `name`.
pub fn reference(name: &str) -> Value {
    json!({"$ref": format!("#{SCHEMAS}/{name}")})
}

/// A reference to the shared response `name` (`components/responses`).
pub fn response(name: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{name}")})
}

/// An answer with a JSON body of `schema`.
pub fn json_answer(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}
