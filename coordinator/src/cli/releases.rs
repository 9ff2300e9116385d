//! `release-key` and `release`: the operator's commands for signed worker releases.

use anyhow::Result;
use e2fleet_coordinator::releases::all_manifests;
use e2fleet_coordinator::releases::publish::{generate_key, publish, read_secret_key, sign_file};
use e2fleet_proto::text::thousands;

use super::args::{ReleaseCommand, ReleaseKeyCommand};
use crate::outln;

/// `release-key ...`
pub fn key(action: ReleaseKeyCommand) -> Result<()> {
    match action {
        ReleaseKeyCommand::Generate { dir } => {
            let public = generate_key(&dir)?;
            outln!(
                "release key written to {}: release.key (secret, 0600) and release.pub",
                dir.display()
            );
            outln!("public key (workers pin it; or E2FLEET_RELEASE_KEY={public}):");
            outln!("{public}");
            Ok(())
        }
    }
}

/// `release ...`
pub fn release(action: ReleaseCommand) -> Result<()> {
    match action {
        ReleaseCommand::Publish {
            binary,
            key,
            releases,
            platform,
            json,
        } => {
            let password = std::env::var("E2FLEET_RELEASE_KEY_PASSWORD").ok();
            let secret = read_secret_key(&key, password)?;
            let platform = platform.unwrap_or_else(e2fleet_proto::release::this_platform);
            let done = publish(&releases, &secret, &binary, &platform)?;
            if json {
                outln!("{}", serde_json::to_string(&done)?);
            } else {
                outln!(
                    "offering e2fleet-worker {} for {}: {} bytes, sha256 {}, signed by {}",
                    done.manifest.version,
                    done.manifest.platform,
                    thousands(done.manifest.size),
                    done.manifest.sha256,
                    done.public_key
                );
            }
            Ok(())
        }
        ReleaseCommand::Sign { file, key } => {
            let password = std::env::var("E2FLEET_RELEASE_KEY_PASSWORD").ok();
            let secret = read_secret_key(&key, password)?;
            let signature = sign_file(&secret, &file)?;
            outln!("{}", signature.display());
            Ok(())
        }
        ReleaseCommand::Show { releases } => {
            let offered = all_manifests(&releases);
            for m in &offered {
                outln!(
                    "{:<16} {:<10} {:>14} bytes  sha256 {}",
                    m.platform,
                    m.version,
                    thousands(m.size),
                    m.sha256
                );
            }
            if offered.is_empty() {
                outln!("no worker release offered from {}", releases.display());
            }
            Ok(())
        }
    }
}
