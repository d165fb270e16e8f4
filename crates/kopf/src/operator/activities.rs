//! The [`Operator`]'s activities: startup, cleanup, probe and login handlers, and the
//! context they run in.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kopf_core::activities::Probes;
use kopf_core::extract::IntoHandler;
use kopf_core::handler::{HandlerError, HandlerSpec};

use super::Operator;

impl Operator {
    /// A startup handler: all of them run (and succeed, retried on temporary errors)
    /// before anything is watched; a permanent failure stops the operator. They see the
    /// operator's memo itself: what they set there, objects start from.
    pub fn on_startup<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.startup
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A cleanup handler: runs once when the operator exits, after every resource has
    /// stopped.
    pub fn on_cleanup<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.cleanup
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A probe handler: its result is reported under its id by [`probes`](Self::probes)
    /// (the liveness endpoint).
    pub fn on_probe<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.probes
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A login handler: the operator connects with the configuration it returns (instead
    /// of the kubeconfig or the in-cluster account), and calls it again whenever the API
    /// server answers 401 Unauthorized. Used by [`connect`](Self::connect) and
    /// [`main`](Self::main) (not with `--fake`).
    ///
    /// ```no_run
    /// use kopf::{HandlerError, Operator};
    ///
    /// let operator = Operator::new().on_login(|| async {
    ///     let token = std::fs::read_to_string("/var/run/secrets/my-token")?;
    ///     let mut config = kube::Config::new("https://kubernetes.example:6443".parse().map_err(HandlerError::other)?);
    ///     config.auth_info.token = Some(token.trim().to_string().into());
    ///     Ok::<_, HandlerError>(config)
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_login<F, Fut, E>(mut self, login: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<kube::Config, E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.login = Some(Arc::new(move || {
            let fut = login();
            Box::pin(async move { fut.await.map_err(Into::into) })
        }));
        self
    }

    /// The probe handlers with the operator's memo and indexes, results cached for 10 s:
    /// `probes().run().await` gives `{probe-id: result}`.
    pub fn probes(&self) -> Arc<Probes> {
        Arc::new(Probes::new(
            self.probes.clone(),
            self.activity_context(None),
            Duration::from_secs(10),
        ))
    }

    pub(crate) fn activity_context(
        &self,
        client: Option<&kube::Client>,
    ) -> kopf_core::activities::ActivityContext {
        let mut extensions = self.settings.extensions.clone();
        extensions.insert(self.settings.indexes.clone());
        if let Some(client) = client {
            extensions.insert(client.clone());
        }
        kopf_core::activities::ActivityContext {
            memo: kopf_core::memo::Memos::operator(Arc::new(self.memo.clone())),
            extensions,
            stack: self.stack.build(None),
        }
    }
}
