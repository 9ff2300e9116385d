//! `release-key generate` and `release publish`: the operator's side of signed updates.
//!
//! The key is minisign's: `release-key generate` writes `release.key` (the secret key,
//! unencrypted, 0600 in a 0700 folder: keep it off the coordinator if you can) and
//! `release.pub`; a key made with `minisign -G` works too (its password from
//! `E2FLEET_RELEASE_KEY_PASSWORD`). `release publish` reads the version stamped in the
//! binary, signs the binary with a trusted comment that binds version, platform, size and
//! SHA-256 ([`Statement`]), writes the version's files and then, by a rename, the
//! manifest that offers it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use e2fleet_proto::release::{BINARY, MAX_BINARY_BYTES, Manifest, Statement, stamped_version};
use minisign::{KeyPair, PublicKey, PublicKeyBox, SecretKey, SecretKeyBox};

/// The secret key's file name in the folder `release-key generate` writes.
pub const SECRET_KEY_FILE: &str = "release.key";
/// The public key's file name (there and in the releases folder).
pub const PUBLIC_KEY_FILE: &str = "release.pub";

/// Writes a new key pair into `dir` (created 0700); refuses to overwrite a key.
/// Returns the public key's base64 line (what workers pin).
pub fn generate_key(dir: &Path) -> Result<String> {
    let secret = dir.join(SECRET_KEY_FILE);
    let public = dir.join(PUBLIC_KEY_FILE);
    if secret.exists() || public.exists() {
        bail!(
            "{} already holds a release key: workers trust it, so it is not replaced (move it away first if you mean to)",
            dir.display()
        );
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let KeyPair { pk, sk } = KeyPair::generate_unencrypted_keypair()
        .map_err(|e| anyhow::anyhow!("cannot generate a key: {e}"))?;
    let sk_box = sk
        .to_box(Some("e2fleet release key (secret)"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    write_new(&secret, sk_box.into_string().as_bytes(), 0o600)?;
    let pk_box = pk.to_box().map_err(|e| anyhow::anyhow!("{e}"))?;
    write_new(&public, pk_box.into_string().as_bytes(), 0o644)?;
    Ok(pk.to_base64())
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// Reads a secret key (unencrypted, or with `password`).
pub fn read_secret_key(path: &Path, password: Option<String>) -> Result<SecretKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the release key {}", path.display()))?;
    let sk_box = SecretKeyBox::from_string(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a minisign secret key: {e}", path.display()))?;
    match password {
        Some(password) => sk_box.into_secret_key(Some(password)),
        None => sk_box.into_unencrypted_secret_key(),
    }
    .map_err(|e| {
            anyhow::anyhow!(
                "cannot open the release key {}: {e} (an encrypted key: set E2FLEET_RELEASE_KEY_PASSWORD)",
                path.display()
            )
        })
}

/// What `release publish` did.
#[derive(Debug, serde::Serialize)]
pub struct Published {
    /// The manifest now offered.
    #[serde(flatten)]
    pub manifest: Manifest,
    /// The public key it is signed with (base64).
    pub public_key: String,
    /// The binary's path in the releases folder.
    pub path: PathBuf,
}

/// Signs `binary` for `platform` with `key` and offers it from `releases`.
pub fn publish(
    releases: &Path,
    key: &SecretKey,
    binary: &Path,
    platform: &str,
) -> Result<Published> {
    if !e2fleet_proto::release::is_path_safe(platform) {
        bail!("{platform:?} is not a platform name (e.g. x86_64-linux)");
    }
    let meta =
        std::fs::metadata(binary).with_context(|| format!("cannot read {}", binary.display()))?;
    if meta.len() == 0 || meta.len() > MAX_BINARY_BYTES {
        bail!(
            "{} has {} bytes; a worker release is 1..={MAX_BINARY_BYTES}",
            binary.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(binary)?;
    check_platform(&bytes, platform)?;
    let version = stamped_version(&bytes).with_context(|| {
        format!(
            "{} carries no e2fleet worker version stamp: is it an e2fleet-worker binary?",
            binary.display()
        )
    })?;
    let statement = Statement {
        version: version.clone(),
        platform: platform.to_string(),
        size: bytes.len() as u64,
        sha256: format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&bytes)),
    };
    let pk = PublicKey::from_secret_key(key).map_err(|e| anyhow::anyhow!("{e}"))?;
    let signature = minisign::sign(
        Some(&pk),
        key,
        std::io::Cursor::new(&bytes),
        Some(&statement.to_string()),
        Some("e2fleet worker release"),
    )
    .map_err(|e| anyhow::anyhow!("cannot sign: {e}"))?;
    let folder = releases.join("worker").join(platform);
    let version_dir = folder.join(version.to_string());
    std::fs::create_dir_all(&version_dir)
        .with_context(|| format!("cannot create {}", version_dir.display()))?;
    let target = version_dir.join(BINARY);
    replace(&target, &bytes)?;
    replace(
        &version_dir.join(format!("{BINARY}.minisig")),
        signature.into_string().as_bytes(),
    )?;
    let pk_box: PublicKeyBox = pk.to_box().map_err(|e| anyhow::anyhow!("{e}"))?;
    replace(
        &releases.join(PUBLIC_KEY_FILE),
        pk_box.into_string().as_bytes(),
    )?;
    let manifest = Manifest {
        version: version.to_string(),
        platform: platform.to_string(),
        size: statement.size,
        sha256: statement.sha256,
    };
    replace(
        &folder.join("current.json"),
        serde_json::to_string_pretty(&manifest)?.as_bytes(),
    )?;
    Ok(Published {
        manifest,
        public_key: pk.to_base64(),
        path: target,
    })
}

/// Writes `path` whole or not at all (a temporary file renamed over it).
fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    {
        let mut file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Refuses a binary that is not an executable of `platform` (ELF of that machine for
/// Linux), so a release cannot be published for the wrong machines by a slip.
fn check_platform(bytes: &[u8], platform: &str) -> Result<()> {
    let Some((arch, os)) = platform.split_once('-') else {
        bail!("{platform:?} is not ARCH-OS (e.g. x86_64-linux)");
    };
    if os != "linux" {
        return Ok(());
    }
    if bytes.len() < 20 || &bytes[..4] != b"\x7fELF" {
        bail!("the binary is not an ELF executable, which {platform} needs");
    }
    let machine = u16::from_le_bytes([bytes[18], bytes[19]]);
    let expected = match arch {
        "x86_64" => 62,
        "aarch64" => 183,
        "riscv64" => 243,
        _ => return Ok(()),
    };
    if machine != expected {
        bail!("the binary is built for another machine (ELF machine {machine}), not {platform}");
    }
    Ok(())
}

/// Signs any `file` with `key` into `FILE.minisig` (the trusted comment names the file and
/// its SHA-256); returns the signature's path.
pub fn sign_file(key: &SecretKey, file: &Path) -> Result<PathBuf> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let comment = format!(
        "file:{name} sha256={:x}",
        <sha2::Sha256 as sha2::Digest>::digest(&bytes)
    );
    let pk = PublicKey::from_secret_key(key).map_err(|e| anyhow::anyhow!("{e}"))?;
    let signature = minisign::sign(
        Some(&pk),
        key,
        std::io::Cursor::new(&bytes),
        Some(&comment),
        Some("e2fleet release file"),
    )
    .map_err(|e| anyhow::anyhow!("cannot sign: {e}"))?;
    let mut out = file.as_os_str().to_os_string();
    out.push(".minisig");
    let out = PathBuf::from(out);
    replace(&out, signature.into_string().as_bytes())?;
    Ok(out)
}
