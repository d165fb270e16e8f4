//! The API semantics: create, update, patch, delete, lists, CRD lifecycle, namespaces and
//! garbage collection, on top of the [`Store`](crate::apiserver::storage::Store).
//!
//! Everything here is synchronous and runs under one lock, which keeps resourceVersions,
//! history and watch fan-out strictly ordered. [`State`] is defined in `state`; each verb
//! adds its methods to it from its own module (`create`, `update`, `patching`, `delete`),
//! next to the rules they share (`validation`, `namespaces`, `crd`, `gc`).

mod access;
mod bootstrap;
mod crd;
mod create;
mod defaults;
mod delete;
pub mod events;
mod gc;
mod gotime;
mod meta;
mod names;
mod namespaces;
pub(crate) mod objectmeta;
mod options;
mod patching;
mod state;
mod update;
mod validation;
pub(crate) mod webhook_configs;

pub use access::{AccessRequest, Decision, ResourceAttributes, SUPERUSER_GROUP, answered};
pub use bootstrap::{KUBERNETES_SERVICE_IP, apiservice_name};
pub use crd::CRD_CLEANUP_FINALIZER;
pub use meta::{now, rv_of};
pub(crate) use options::PatchTarget;
pub use options::{DeleteOptions, PatchType, StateConfig, WriteOptions, Written, WrittenBody};
pub use state::State;
