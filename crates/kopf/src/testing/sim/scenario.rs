//! What the test does to the cluster in a simulated run: objects created, changed and
//! deleted, in an order and with pauses drawn from the seed.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::Value;

use super::dice::Dice;

/// The test's side of a [`Simulation`](super::Simulation): objects of one resource created,
/// patched and deleted. The steps of one object keep their order; the steps of different
/// objects interleave in an order drawn from the seed, with pauses of up to
/// [`gaps`](Self::gaps) between them (the operator works meanwhile).
///
/// ```
/// use kopf::testing::sim::Scenario;
/// use serde_json::json;
///
/// let scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
///     .create(json!({"metadata": {"name": "a"}, "spec": {"field": "x"}}))
///     .patch("a", json!({"spec": {"field": "y"}}))
///     .delete("a")
///     .create(json!({"metadata": {"name": "b"}, "spec": {"field": "z"}}));
/// assert_eq!(scenario.len(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct Scenario {
    pub(super) resource: ApiResource,
    pub(super) namespace: String,
    steps: Vec<Step>,
    gap: Duration,
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create this object (its `apiVersion` and `kind` are the scenario's).
    Create(Value),
    /// Apply this JSON merge patch to the named object.
    Patch(String, Value),
    /// Delete the named object.
    Delete(String),
}

impl Step {
    /// The name of the object the step is about.
    pub fn object(&self) -> &str {
        match self {
            Step::Create(body) => body["metadata"]["name"].as_str().unwrap_or_default(),
            Step::Patch(name, _) | Step::Delete(name) => name,
        }
    }
}

impl Scenario {
    /// A scenario about objects of a resource: its `apiVersion`, kind and plural. Its
    /// objects are in the `default` namespace, with pauses of up to 2 s between steps.
    pub fn new(api_version: &str, kind: &str, plural: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        Scenario {
            resource: ApiResource::from_gvk_with_plural(&gvk, plural),
            namespace: "default".into(),
            steps: Vec::new(),
            gap: Duration::from_secs(2),
        }
    }

    /// The namespace of the scenario's objects.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Creates an object (a name in `metadata.name` is required).
    pub fn create(mut self, body: Value) -> Self {
        self.steps.push(Step::Create(body));
        self
    }

    /// Changes an object with a JSON merge patch.
    pub fn patch(mut self, name: &str, patch: Value) -> Self {
        self.steps.push(Step::Patch(name.into(), patch));
        self
    }

    /// Deletes an object.
    pub fn delete(mut self, name: &str) -> Self {
        self.steps.push(Step::Delete(name.into()));
        self
    }

    /// The longest pause between two steps (default 2 s of operator time).
    pub fn gaps(mut self, longest: Duration) -> Self {
        self.gap = longest;
        self
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether there is no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The steps in a seed's order, each with the pause before it: every object's own
    /// steps in the order written, the objects interleaved by the seed.
    pub(super) fn ordered(&self, dice: &Dice) -> Vec<(Duration, Step)> {
        let mut queues: BTreeMap<&str, std::collections::VecDeque<&Step>> = BTreeMap::new();
        let mut objects: Vec<&str> = Vec::new();
        for step in &self.steps {
            let name = step.object();
            if !queues.contains_key(name) {
                objects.push(name);
            }
            queues.entry(name).or_default().push_back(step);
        }
        let gap = self.gap.as_millis() as u64;
        let mut ordered = Vec::with_capacity(self.steps.len());
        for n in 0..self.steps.len() as u64 {
            let waiting: Vec<&str> = objects
                .iter()
                .copied()
                .filter(|o| queues.get(o).is_some_and(|q| !q.is_empty()))
                .collect();
            let pick = waiting[dice.below("step order", n, waiting.len() as u64) as usize];
            if let Some(step) = queues.get_mut(pick).and_then(|q| q.pop_front()) {
                let pause = Duration::from_millis(dice.below("step gap", n, gap + 1));
                ordered.push((pause, step.clone()));
            }
        }
        ordered
    }

    /// Does a step with the test's client; returns what it did, and what came of it.
    pub(super) async fn apply(
        &self,
        client: &kube::Client,
        step: &Step,
    ) -> (String, Result<Applied, kube::Error>) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &self.namespace, &self.resource);
        let at = format!("{}/{}", self.namespace, step.object());
        match step {
            Step::Create(body) => {
                let result = match self.typed(body) {
                    Ok(object) => api.create(&PostParams::default(), &object).await,
                    Err(e) => Err(kube::Error::SerdeError(e)),
                };
                (format!("create {at}"), result.map(|o| Applied::of(Some(o))))
            }
            Step::Patch(name, patch) => {
                let params = PatchParams::default();
                let result = api.patch(name, &params, &Patch::Merge(patch)).await;
                let what = format!("patch {at} with {patch}");
                (what, result.map(|o| Applied::of(Some(o))))
            }
            Step::Delete(name) => {
                // The object while its finalizers hold it; none when it went at once.
                let result = api.delete(name, &DeleteParams::default()).await;
                (
                    format!("delete {at}"),
                    result.map(|e| Applied::of(e.left())),
                )
            }
        }
    }

    /// A create step's body with the scenario's `apiVersion` and kind (a body that is not
    /// a JSON object is refused as it is: not an object).
    fn typed(&self, body: &Value) -> Result<DynamicObject, serde_json::Error> {
        let mut object: DynamicObject = serde_json::from_value(body.clone())?;
        object.types = Some(kube::core::TypeMeta {
            api_version: self.resource.api_version.clone(),
            kind: self.resource.kind.clone(),
        });
        Ok(object)
    }
}

/// What a step left: the object's uid, and whether it carried Kopf's finalizer.
#[derive(Debug, Clone, Default)]
pub(super) struct Applied {
    pub(super) uid: Option<String>,
    pub(super) finalized: bool,
}

impl Applied {
    fn of(object: Option<DynamicObject>) -> Self {
        let Some(object) = object else {
            return Applied::default();
        };
        let finalized = object
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == super::invariants::FINALIZER);
        Applied {
            uid: object.metadata.uid,
            finalized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_object_keeps_the_order_of_its_steps() {
        let scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
            .create(json!({"metadata": {"name": "a"}}))
            .patch("a", json!({"spec": {"v": 1}}))
            .delete("a")
            .create(json!({"metadata": {"name": "b"}}))
            .delete("b");
        let mut orders = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let ordered = scenario.ordered(&Dice::new(seed));
            let names: Vec<String> = ordered
                .iter()
                .map(|(_, s)| format!("{:?}", std::mem::discriminant(s)) + s.object())
                .collect();
            let of = |o: &str| -> Vec<&(Duration, Step)> {
                ordered.iter().filter(|(_, s)| s.object() == o).collect()
            };
            assert!(matches!(of("a")[0].1, Step::Create(_)), "{names:?}");
            assert!(matches!(of("a")[2].1, Step::Delete(_)), "{names:?}");
            assert!(matches!(of("b")[1].1, Step::Delete(_)), "{names:?}");
            assert!(
                ordered
                    .iter()
                    .all(|(gap, _)| *gap <= Duration::from_secs(2))
            );
            orders.insert(names);
        }
        assert!(
            orders.len() > 3,
            "the seeds interleave the objects: {orders:?}"
        );
    }
}
