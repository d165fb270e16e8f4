//! The options of `run` that say where the engine's state is kept on objects
//! (`--diff-base-storage`, `--progress-storage`), applied to the operator's own settings.

use kopf_core::progress::ProgressStorage;
use kopf_diff::essence::DiffBaseLocation;

use super::RunArgs;
use crate::Operator;

/// Where `--diff-base-storage` and `--progress-storage` keep their state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Storage {
    /// Annotations under `kopf.zalando.org/` (Kopf's default).
    Annotations,
    /// Under `status.kopf` (Kopf's `StatusDiffBaseStorage` / `StatusProgressStorage`).
    Status,
}

impl RunArgs {
    /// The operator with the storage options of the command line applied (the progress
    /// storage after the diff-base's, so that an explicit `--progress-storage` wins over
    /// the diff-base's default).
    pub fn storage(&self, mut operator: Operator) -> Operator {
        if let Some(storage) = self.diff_base_storage {
            operator = operator.diff_base_storage(match storage {
                Storage::Annotations => DiffBaseLocation::Annotations,
                Storage::Status => DiffBaseLocation::status(),
            });
        }
        if let Some(storage) = self.progress_storage {
            let keys = operator.persistence.progress.keys.clone();
            operator = operator.progress_storage(match storage {
                Storage::Annotations => ProgressStorage {
                    keys,
                    ..ProgressStorage::default()
                },
                Storage::Status => ProgressStorage {
                    keys,
                    ..ProgressStorage::status(kopf_diff::essence::STATUS_NAME)
                },
            });
        }
        operator
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use kopf_core::progress::ProgressLocation;

    use super::*;
    use crate::cli::Cli;

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["op", "run"].iter().chain(args)).expect("parses");
        cli.run_args().cloned().expect("run")
    }

    #[test]
    fn status_diff_base_takes_progress_along_unless_chosen() {
        let status = || ProgressLocation::Status {
            name: "kopf".into(),
        };
        let op = run_args(&["--diff-base-storage", "status"]).storage(Operator::new());
        assert_eq!(op.persistence.essence.location, DiffBaseLocation::status());
        assert_eq!(op.persistence.progress.location, status());
        let op = run_args(&[
            "--diff-base-storage",
            "status",
            "--progress-storage",
            "annotations",
        ])
        .storage(Operator::new());
        assert_eq!(op.persistence.essence.location, DiffBaseLocation::status());
        assert_eq!(
            op.persistence.progress.location,
            ProgressLocation::Annotations
        );
        // The operator's own choice of progress storage is kept.
        let own = Operator::new().progress_storage(ProgressStorage::default());
        let op = run_args(&["--diff-base-storage", "status"]).storage(own);
        assert_eq!(
            op.persistence.progress.location,
            ProgressLocation::Annotations
        );
        // Nothing given: the operator's settings.
        let op =
            run_args(&[]).storage(Operator::new().diff_base_storage(DiffBaseLocation::status()));
        assert_eq!(op.persistence.progress.location, status());
        let op = run_args(&["--progress-storage", "status"]).storage(Operator::new());
        assert_eq!(
            op.persistence.essence.location,
            DiffBaseLocation::Annotations
        );
        assert_eq!(op.persistence.progress.location, status());
    }
}
