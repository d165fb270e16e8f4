//! The fake Kubernetes API server, as modules with one job each.
//!
//! A request enters at [`http`] (routing, content negotiation, responses, the route
//! groups), goes down through [`webhooks`] (admission and conversion webhooks and calling
//! them) and [`semantics`] (the rules of the verbs) to [`storage`] (objects,
//! resourceVersions, history, watch fan-out), never back up: the webhooks reach the
//! server's state through a trait that `http` implements, and the rules of stored webhook
//! configurations are part of `semantics`.
//!
//! The building blocks those layers use: [`catalog`] (resource definitions) with
//! [`kinds`] (the built-in kinds and their storage properties, one row each), [`error`]
//! (API errors as `Status`), [`patch`], [`selectors`], [`schema`], [`managed_fields`],
//! [`shards`] (KEP-5866 shard selectors), [`tables`] with [`jsonpath`] (kube's JSONPath
//! dialect of printer columns), [`protobuf`], [`discovery`] and [`openapi`] (documents of the served
//! resources) and [`control`] (faults, request log, counters).

pub mod catalog;
pub mod cel;
pub mod control;
pub mod discovery;
pub mod error;
pub mod gojson;
pub mod http;
pub mod jsonpath;
pub mod kinds;
pub mod kubelet;
pub mod managed_fields;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod schema;
pub mod selectors;
pub mod semantics;
pub mod shards;
pub mod simulation;
pub mod storage;
pub(crate) mod sync;
pub mod tables;
pub mod tls;
pub mod webhooks;
