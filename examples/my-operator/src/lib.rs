//! A greeting operator: for every `Greeting` (`example.com/v1`), a message in its status.
//!
//! The resource is a Rust type (`#[derive(CustomResource)]`): the handlers are registered on
//! it with `Selector::of::<Greeting>()`, read its spec typed (`Spec<GreetingSpec>`), and the
//! operator declares its CRD (`Operator::crd::<Greeting>()`): the binary prints it
//! (`my-operator crd`) and `run --fake` applies it. Its status schema declares what the
//! handlers return (`status.greet_fn.message`): the API server stores only what the schema
//! declares.

use kopf::prelude::*;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a `Greeting` asks for.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus"
)]
pub struct GreetingSpec {
    /// Whom to greet.
    pub name: String,
    /// Greet loudly.
    #[serde(default)]
    pub shout: bool,
}

/// The status: one field per handler that returns a result (`status.<handler-id>`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct GreetingStatus {
    /// The result of the `greet_fn` handler.
    pub greet_fn: Option<Greeted>,
}

/// What `greet_fn` returns.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Greeted {
    /// The greeting.
    pub message: String,
}

/// Greets on creation and on every change of the spec.
async fn greet_fn(
    Spec(spec): Spec<GreetingSpec>,
    Name(name): Name,
) -> Result<Greeted, HandlerError> {
    if spec.name.is_empty() {
        return Err(HandlerError::permanent(format!(
            "{name}: spec.name is empty, nobody to greet"
        )));
    }
    let message = format!("Hello, {}!", spec.name);
    Ok(Greeted {
        message: if spec.shout {
            message.to_uppercase()
        } else {
            message
        },
    })
}

/// The operator: `greet_fn` on creation and on updates of `Greeting`s.
pub fn operator() -> Operator {
    Operator::new()
        .crd::<Greeting>()
        .on_create(Selector::of::<Greeting>(), "greet_fn", greet_fn)
        .on_update(Selector::of::<Greeting>(), "greet_fn", greet_fn)
}
