//! Fetching an offered release from the coordinator and staging it in the releases
//! folder, checked: the manifest's bounds, the size while it streams, then the
//! signature by the fleet's key over the whole file and the signed statement (version,
//! platform, size, SHA-256). Nothing is written where it could run until all of that
//! holds; a refused or failed fetch leaves the folder as it was.

use std::io::Write;

use e2fleet_proto::release::{BINARY, MAX_SMALL_FILE_BYTES, Manifest, this_platform};
use minisign_verify::PublicKey;
use semver::Version;
use tracing::info;

use super::UpdateError;
use super::install::{Folder, write_file};
use super::signature::{parse_key, parse_signature, pin, pinned, statement};
use crate::api::{Coordinator, DownloadError};

impl From<DownloadError> for UpdateError {
    fn from(e: DownloadError) -> UpdateError {
        match e {
            DownloadError::Refused(m) => UpdateError::refused(m),
            DownloadError::Unavailable(m) => UpdateError::unavailable(m),
            DownloadError::Local(m) => UpdateError::local(m),
        }
    }
}

async fn small(api: &Coordinator, path: &str) -> Result<String, UpdateError> {
    let mut bytes = Vec::new();
    api.download(path, MAX_SMALL_FILE_BYTES, |chunk| {
        bytes.extend_from_slice(chunk);
        Ok(())
    })
    .await?;
    String::from_utf8(bytes).map_err(|_| UpdateError::refused(format!("{path} is not text")))
}

/// The fleet's release key: `given`, else the one pinned in `folder`, else the
/// coordinator's (pinned from now on).
pub async fn release_key(
    api: &Coordinator,
    folder: &Folder,
    given: Option<&str>,
) -> Result<PublicKey, UpdateError> {
    folder.create()?;
    if let Some(text) = given {
        let key = parse_key(text)?;
        if pinned(folder.path())?.as_deref() != Some(text) {
            pin(folder.path(), text)?;
        }
        return Ok(key);
    }
    if let Some(text) = pinned(folder.path())? {
        return parse_key(&text);
    }
    let text = small(api, "/downloads/release.pub").await?;
    let key = parse_key(&text)?;
    pin(folder.path(), &text)?;
    info!(
        "pinned the fleet's release key from the coordinator (first use): later updates must be signed by it"
    );
    Ok(key)
}

/// Fetches the release offered (when it is newer than `own`) and stages it in `folder`,
/// verified with `key`. Returns its version.
pub async fn fetch_and_stage(
    api: &Coordinator,
    folder: &Folder,
    key: &PublicKey,
    own: &Version,
) -> Result<Version, UpdateError> {
    let platform = this_platform();
    let base = format!("/downloads/worker/{platform}");
    let manifest: Manifest =
        serde_json::from_str(&small(api, &format!("{base}/current.json")).await?)
            .map_err(|e| UpdateError::refused(format!("the release manifest is malformed: {e}")))?;
    let version = manifest.check().map_err(UpdateError::refused)?;
    if manifest.platform != platform {
        return Err(UpdateError::refused(format!(
            "the manifest is for {}, not {platform}",
            manifest.platform
        )));
    }
    if &version <= own {
        return Err(UpdateError::refused(format!(
            "the release offered ({version}) is not newer than this worker ({own}): a downgrade is never installed"
        )));
    }
    if folder.is_refused(&version) {
        return Err(UpdateError::refused(format!(
            "{version} was rolled back on this machine before"
        )));
    }
    // staged before (a switch that did not happen yet): reading and hashing it is disk
    // work, off the runtime's threads
    let already = {
        let (folder, key, version) = (folder.clone(), key.clone(), version.clone());
        tokio::task::spawn_blocking(move || folder.verify_installed(&version, &key).is_ok())
            .await
            .unwrap_or(false)
    };
    if already {
        return Ok(version);
    }
    let signature_text = small(api, &format!("{base}/{}", manifest.signature_path())).await?;
    let signature = parse_signature(&signature_text)?;
    let said = statement(&signature)?;
    if said.version != version || said.size != manifest.size || said.sha256 != manifest.sha256 {
        return Err(UpdateError::refused(
            "the manifest and the signed statement disagree".into(),
        ));
    }
    let mut verifier = key.verify_stream(&signature).map_err(|e| {
        UpdateError::refused(format!(
            "the release is not signed by the fleet's release key: {e}"
        ))
    })?;
    folder.create()?;
    let dir = folder.version_dir(&version);
    std::fs::create_dir_all(&dir)
        .map_err(|e| UpdateError::local(format!("cannot create {}: {e}", dir.display())))?;
    let partial = dir.join(format!("{BINARY}.partial"));
    let fetched = async {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o700);
        let mut file = options
            .open(&partial)
            .map_err(|e| UpdateError::local(format!("cannot write {}: {e}", partial.display())))?;
        let mut sha = <sha2::Sha256 as sha2::Digest>::new();
        let read = api
            .download(
                &format!("{base}/{}", manifest.binary_path()),
                manifest.size,
                |chunk| {
                    sha2::Digest::update(&mut sha, chunk);
                    verifier.update(chunk);
                    file.write_all(chunk)
                        .map_err(|e| format!("cannot write the update: {e}"))
                },
            )
            .await?;
        if read != manifest.size {
            return Err(UpdateError::refused(format!(
                "the download ended after {read} of {} bytes",
                manifest.size
            )));
        }
        tokio::task::spawn_blocking(move || file.sync_all())
            .await
            .map_err(|e| UpdateError::local(format!("cannot write the update: {e}")))?
            .map_err(|e| UpdateError::local(format!("cannot write the update: {e}")))?;
        if format!("{:x}", sha2::Digest::finalize(sha)) != manifest.sha256 {
            return Err(UpdateError::refused(
                "the download's sha256 is not the release's".into(),
            ));
        }
        verifier.finalize().map_err(|e| {
            UpdateError::refused(format!("the release's signature does not hold: {e}"))
        })?;
        Ok(())
    }
    .await;
    if let Err(e) = fetched {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    // the signature beside it, then the binary under its name: staged
    let staged = write_file(
        &dir.join(format!("{BINARY}.minisig")),
        signature_text.as_bytes(),
    )
    .and_then(|()| {
        std::fs::rename(&partial, dir.join(BINARY))
            .map_err(|e| UpdateError::local(format!("cannot install the update: {e}")))
    });
    if let Err(e) = staged {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    info!(%version, bytes = manifest.size, "update downloaded and verified");
    Ok(version)
}
