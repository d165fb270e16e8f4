//! The Docker engine as `cargo xtask image` uses it: found and checked (with the way to
//! install and start it when it is missing), images built from `deploy/Dockerfile`, the
//! local runtime base made from the shared libraries of the binaries, image sizes.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::e2e::cluster::find_program;
use tokio::process::Command;

/// How to get an engine on a machine without one (Debian's package, as CI does).
pub const INSTALL_HINT: &str = "install and start an engine: `bash .ci/docker.sh` (Debian: `apt-get install -y docker.io`, then `dockerd &` as root), or see https://docs.docker.com/engine/install/";

/// A Docker CLI whose daemon answered.
#[derive(Debug, Clone)]
pub struct Docker {
    program: PathBuf,
    /// The daemon's version (`docker info`'s ServerVersion).
    pub server_version: String,
    /// BuildKit through the buildx plugin; without it, the legacy builder
    /// (`DOCKER_BUILDKIT=0`), which a newer CLI without buildx would otherwise refuse.
    buildx: bool,
}

impl Docker {
    /// Finds `docker` on the PATH and checks that its daemon answers.
    pub async fn connect() -> Result<Self> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let Some(program) = find_program("docker", &path) else {
            bail!("docker is not installed (no `docker` on the PATH); {INSTALL_HINT}");
        };
        let info = Command::new(&program)
            .args(["info", "--format", "{{.ServerVersion}}"])
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {} info", program.display()))?;
        let server_version = String::from_utf8_lossy(&info.stdout).trim().to_string();
        if !info.status.success() || server_version.is_empty() {
            bail!(
                "docker is installed ({}) but its daemon does not answer: {}; {INSTALL_HINT}",
                program.display(),
                String::from_utf8_lossy(&info.stderr).trim()
            );
        }
        let buildx = Command::new(&program)
            .args(["buildx", "version"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success());
        Ok(Self {
            program,
            server_version,
            buildx,
        })
    }

    /// Which builder `build` uses, for messages.
    pub fn builder_name(&self) -> &'static str {
        if self.buildx {
            "BuildKit"
        } else {
            "the legacy builder (no buildx plugin)"
        }
    }

    /// A `docker` command with these arguments.
    pub fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(&self.program);
        cmd.args(args).stdin(Stdio::null());
        if !self.buildx {
            cmd.env("DOCKER_BUILDKIT", "0");
        }
        cmd
    }

    /// Runs `docker <args>`; its stdout, or an error with its stderr.
    pub async fn run<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let display = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let out = self
            .command(&args)
            .output()
            .await
            .with_context(|| format!("running docker {display}"))?;
        if !out.status.success() {
            bail!(
                "`docker {display}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether an image of this tag exists locally.
    pub async fn has_image(&self, tag: &str) -> bool {
        self.command(["image", "inspect", "--format", "{{.Id}}", tag])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success())
    }

    /// The size of a local image in bytes.
    pub async fn image_size(&self, tag: &str) -> Result<u64> {
        let text = self
            .run(["image", "inspect", "--format", "{{.Size}}", tag])
            .await?;
        text.trim()
            .parse()
            .with_context(|| format!("image size of {tag}: {text:?}"))
    }

    /// `docker build -f deploy/Dockerfile --target prebuilt` of one binary on `base`: the
    /// build context is a new directory holding only the binary, as `operator`.
    pub async fn build_prebuilt(
        &self,
        dockerfile: &Path,
        binary: &Path,
        base: &str,
        tag: &str,
    ) -> Result<()> {
        let context = tempfile::tempdir().context("a directory for the build context")?;
        // A hard link when the target directory is on the same file system (no copy of a
        // large debug binary), a copy otherwise.
        let dest = context.path().join("operator");
        if std::fs::hard_link(binary, &dest).is_err() {
            std::fs::copy(binary, &dest)
                .with_context(|| format!("copying {} into the context", binary.display()))?;
        }
        let base_arg = format!("RUNTIME_IMAGE={base}");
        let args: Vec<&OsStr> = vec![
            "build".as_ref(),
            "--quiet".as_ref(),
            "--file".as_ref(),
            dockerfile.as_os_str(),
            "--target".as_ref(),
            "prebuilt".as_ref(),
            "--build-arg".as_ref(),
            base_arg.as_ref(),
            "--tag".as_ref(),
            tag.as_ref(),
            context.path().as_os_str(),
        ];
        self.run(args).await.map(|_| ())
    }

    /// Makes the runtime base `tag` if it is absent: a `docker import` of a file tree with the
    /// shared libraries `libraries` (at the paths the binaries load them from), a passwd and
    /// group with the user `nonroot` (65532, as distroless has), the CA bundle of this
    /// machine and a `/tmp`: what the distroless `cc` image gives, made here without a
    /// registry. Returns whether it was made (false: cached).
    pub async fn ensure_base(&self, tag: &str, libraries: &BTreeSet<PathBuf>) -> Result<bool> {
        if self.has_image(tag).await {
            return Ok(false);
        }
        let dir = tempfile::tempdir().context("a directory for the base image's files")?;
        let root = dir.path().join("root");
        for lib in libraries {
            let relative = lib
                .strip_prefix("/")
                .with_context(|| format!("library path {} is not absolute", lib.display()))?;
            let dest = root.join(relative);
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            // The file itself, not the symbolic link ldd names.
            std::fs::copy(lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
        }
        let etc = root.join("etc");
        std::fs::create_dir_all(etc.join("ssl/certs")).context("creating etc/ssl/certs")?;
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )
        .context("writing etc/passwd")?;
        std::fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n")
            .context("writing etc/group")?;
        let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
        if bundle.is_file() {
            std::fs::copy(bundle, etc.join("ssl/certs/ca-certificates.crt"))
                .context("copying the CA bundle")?;
        }
        for d in ["tmp", "home/nonroot"] {
            std::fs::create_dir_all(root.join(d)).with_context(|| format!("creating {d}"))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
                .context("chmod 1777 tmp")?;
        }
        let tarball = dir.path().join("root.tar");
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .args(["--numeric-owner", "--owner=0", "--group=0", "-cf"])
            .arg(&tarball)
            .arg(".")
            .status()
            .await
            .context("running tar (the base image's files)")?;
        if !tar.success() {
            bail!("tar of the base image's files failed ({tar})");
        }
        let tarball_arg = tarball.as_os_str();
        self.run([
            OsStr::new("import"),
            OsStr::new("--message"),
            OsStr::new("kopf-rs runtime base: shared libraries of the operator, nonroot user"),
            tarball_arg,
            OsStr::new(tag),
        ])
        .await?;
        Ok(true)
    }
}

/// The shared libraries a dynamically linked binary loads (its interpreter included), as
/// `ldd` resolves them on this machine.
pub async fn shared_libraries(binary: &Path) -> Result<BTreeSet<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .await
        .context("running ldd (package libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "ldd {} failed: {}{}",
            binary.display(),
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ldd(&text).ok_or_else(|| {
        anyhow!(
            "ldd {} lists no loadable library:\n{text}",
            binary.display()
        )
    })
}

/// The absolute paths in ldd's output (`libc.so.6 => /lib/.../libc.so.6 (0x...)`,
/// `/lib64/ld-linux-x86-64.so.2 (0x...)`); the vDSO has none. None when there are none.
fn parse_ldd(text: &str) -> Option<BTreeSet<PathBuf>> {
    let libs: BTreeSet<PathBuf> = text
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    (!libs.is_empty()).then_some(libs)
}

/// A tag for the base made of these libraries: their paths and sizes hashed, so that a
/// binary needing another library gets another base.
pub fn base_tag(libraries: &BTreeSet<PathBuf>) -> String {
    use std::hash::{Hash, Hasher};
    // FNV-1a, stable across runs and Rust versions (unlike DefaultHasher's keys).
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    for lib in libraries {
        lib.hash(&mut h);
        std::fs::metadata(lib)
            .map(|m| m.len())
            .unwrap_or(0)
            .hash(&mut h);
    }
    format!("kopf-rs-base:cc-{:08x}", h.finish() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_library_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let libs = parse_ldd(text).expect("libraries");
        let names: Vec<_> = libs.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_none());
    }
}
