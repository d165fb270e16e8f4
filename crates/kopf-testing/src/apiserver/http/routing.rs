//! Routing: a request path to the endpoint it names (resources with their namespace, name
//! and subresource; discovery; OpenAPI; the control endpoints), and the verb a method
//! means for it.

use axum::http::Method;

use crate::apiserver::control::{CONTROL_PREFIX, RequestTarget};

use super::query::{Query, percent_decode};

/// A request to a resource endpoint.
#[derive(Debug, Clone)]
pub(crate) struct ResourceRequest {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) namespace: Option<String>,
    pub(super) plural: String,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    pub(super) watch_prefix: bool,
}

pub(super) enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiIndex,
    OpenApiDoc(String, String),
    OpenApiV2,
    Health,
    Resource(ResourceRequest),
    Control(String),
    /// An access review: its kind, and the namespace of a LocalSubjectAccessReview.
    AccessReview(ReviewKind, Option<String>),
    NotFound,
}

/// The kinds of access review (`authorization.k8s.io/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReviewKind {
    SelfSubject,
    Subject,
    LocalSubject,
}

impl ReviewKind {
    pub(super) fn kind(self) -> &'static str {
        match self {
            Self::SelfSubject => "SelfSubjectAccessReview",
            Self::Subject => "SubjectAccessReview",
            Self::LocalSubject => "LocalSubjectAccessReview",
        }
    }

    pub(super) fn plural(self) -> &'static str {
        match self {
            Self::SelfSubject => "selfsubjectaccessreviews",
            Self::Subject => "subjectaccessreviews",
            Self::LocalSubject => "localsubjectaccessreviews",
        }
    }
}

pub(super) fn route(path: &str) -> Route {
    if let Some(rest) = path.strip_prefix(CONTROL_PREFIX) {
        return Route::Control(rest.trim_start_matches('/').to_string());
    }
    let trimmed = path.trim_end_matches('/');
    let parts: Vec<String> = trimmed
        .split('/')
        .filter(|p| !p.is_empty())
        .map(percent_decode)
        .collect();
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz"] => Route::Health,
        ["api"] => Route::Api,
        ["apis"] => Route::Apis,
        ["openapi", "v3"] => Route::OpenApiIndex,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", "api", v] => Route::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiDoc(g.to_string(), v.to_string()),
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
        ] => Route::AccessReview(ReviewKind::SelfSubject, None),
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            Route::AccessReview(ReviewKind::Subject, None)
        }
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "namespaces",
            ns,
            "localsubjectaccessreviews",
        ] => Route::AccessReview(ReviewKind::LocalSubject, Some(ns.to_string())),
        ["apis", g] => Route::Group(g.to_string()),
        ["api", v] => Route::GroupVersion(String::new(), v.to_string()),
        ["apis", g, v] => Route::GroupVersion(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => resource_route("", v, rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let mut rest = rest.to_vec();
    let mut watch_prefix = false;
    if rest.first() == Some(&"watch") {
        watch_prefix = true;
        rest.remove(0);
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = rest[2..].to_vec();
        } else {
            // The namespace object itself.
            let sub = rest.get(2).map(|s| s.to_string());
            if rest.len() > 3 {
                return Route::NotFound;
            }
            return Route::Resource(ResourceRequest {
                group: group.into(),
                version: version.into(),
                namespace: None,
                plural: "namespaces".into(),
                name: namespace,
                subresource: sub,
                watch_prefix,
            });
        }
    }
    match rest.as_slice() {
        [plural] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: None,
            subresource: None,
            watch_prefix,
        }),
        [plural, name] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: Some(name.to_string()),
            subresource: None,
            watch_prefix,
        }),
        [plural, name, sub] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: Some(name.to_string()),
            subresource: Some(sub.to_string()),
            watch_prefix,
        }),
        _ => Route::NotFound,
    }
}

pub(super) fn resolve_verb(method: &Method, rr: &ResourceRequest, query: &Query) -> String {
    let watch = rr.watch_prefix || matches!(query.bool("watch"), Ok(Some(true)));
    match (method, rr.name.is_some()) {
        (&Method::GET, true) if watch => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watch => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "unknown",
    }
    .to_string()
}

pub(super) fn target_of(r: &Route, method: &Method, query: &Query) -> RequestTarget {
    let simple = |verb: &str| RequestTarget {
        verb: verb.into(),
        ..Default::default()
    };
    match r {
        Route::Version => simple("version"),
        Route::Health => simple("health"),
        Route::Api | Route::Apis | Route::Group(_) | Route::GroupVersion(..) => simple("discovery"),
        Route::OpenApiIndex | Route::OpenApiDoc(..) | Route::OpenApiV2 => simple("openapi"),
        Route::AccessReview(kind, ns) => RequestTarget {
            verb: "create".into(),
            group: "authorization.k8s.io".into(),
            version: "v1".into(),
            resource: kind.plural().into(),
            namespace: ns.clone().unwrap_or_default(),
            ..Default::default()
        },
        Route::Resource(rr) => RequestTarget {
            verb: resolve_verb(method, rr, query),
            group: rr.group.clone(),
            version: rr.version.clone(),
            resource: rr.plural.clone(),
            subresource: rr.subresource.clone().unwrap_or_default(),
            namespace: rr.namespace.clone().unwrap_or_default(),
            name: rr.name.clone().unwrap_or_default(),
        },
        Route::Control(_) | Route::NotFound => simple("other"),
    }
}

/// What a request addresses, from its method, path and query (`watch=true` makes a list a
/// watch): as the server logs it in [`RequestRecord::target`](crate::RequestRecord).
pub fn target_of_request(method: &Method, path: &str, query: Option<&str>) -> RequestTarget {
    target_of(&route(path), method, &Query::parse(query))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert!(matches!(route("/version/"), Route::Version));
        assert!(matches!(route("/api/"), Route::Api));
        match route("/api/v1/namespaces/default/configmaps/c1") {
            Route::Resource(r) => {
                assert_eq!(r.plural, "configmaps");
                assert_eq!(r.namespace.as_deref(), Some("default"));
                assert_eq!(r.name.as_deref(), Some("c1"));
            }
            _ => panic!("not a resource route"),
        }
        match route("/api/v1/namespaces/foo/status") {
            Route::Resource(r) => {
                assert_eq!(r.plural, "namespaces");
                assert_eq!(r.name.as_deref(), Some("foo"));
                assert_eq!(r.subresource.as_deref(), Some("status"));
            }
            _ => panic!("not a namespace route"),
        }
        match route("/apis/kopf.dev/v1/watch/namespaces/ns/kopfexamples") {
            Route::Resource(r) => assert!(r.watch_prefix),
            _ => panic!("not a watch route"),
        }
    }
}
