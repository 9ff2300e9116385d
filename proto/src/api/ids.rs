//! Identifiers of the things the fleet hands around. Jobs, workers and leases are UUIDs;
//! units are database row numbers. Each is its own type, so a lease id can never be passed
//! where a job id is meant, and each is parsed once, where it enters (wire, URL, CLI).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A string that is not a valid id of the named kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} id {value:?} is not valid")]
pub struct BadId {
    /// Which kind of id.
    pub kind: &'static str,
    /// The text given (cut to 64 characters).
    pub value: String,
}

impl BadId {
    fn new(kind: &'static str, value: &str) -> BadId {
        BadId {
            kind,
            value: value.chars().take(64).collect(),
        }
    }
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh random id (from the thread-local CSPRNG: no system call per id).
            pub fn random() -> $name {
                $name(uuid::Builder::from_random_bytes(rand::random()).into_uuid())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl FromStr for $name {
            type Err = BadId;
            fn from_str(s: &str) -> Result<$name, BadId> {
                Uuid::try_parse(s.trim())
                    .map($name)
                    .map_err(|_| BadId::new($kind, s))
            }
        }
    };
}

uuid_id!(
    /// A job.
    JobId,
    "job"
);
uuid_id!(
    /// A worker identity (one registration; a machine may run several).
    WorkerId,
    "worker"
);
uuid_id!(
    /// A lease: one grant of one unit to one worker.
    LeaseId,
    "lease"
);
uuid_id!(
    /// An order study.
    StudyId,
    "study"
);

/// An account: who an enrolment token belongs to (`operator` for the operator's own
/// token). A name of 1-64 letters, digits, `.`, `_` or `-`, chosen by the operator.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountId(String);

impl AccountId {
    /// The operator's account (the `E2FLEET_ENROLL_TOKEN` token).
    pub const OPERATOR: &'static str = "operator";

    /// The operator's account.
    pub fn operator() -> AccountId {
        AccountId(Self::OPERATOR.to_string())
    }

    /// Whether this is the operator's account.
    pub fn is_operator(&self) -> bool {
        self.0 == Self::OPERATOR
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for AccountId {
    type Err = BadId;
    fn from_str(s: &str) -> Result<AccountId, BadId> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(AccountId(s.to_string()))
        } else {
            Err(BadId::new("account", s))
        }
    }
}

/// A team: volunteer accounts whose credit the stats page also shows together, as
/// BOINC's and distributed.net's teams. A name of 1-64 letters, digits, `.`, `_` or `-`,
/// given by the operator; a team is there while an account is in it. A label: nothing
/// that decides trust or work reads it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TeamId(String);

impl TeamId {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TeamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TeamId {
    type Err = BadId;
    fn from_str(s: &str) -> Result<TeamId, BadId> {
        // the same rule as an account's name
        match s.parse::<AccountId>() {
            Ok(_) => Ok(TeamId(s.to_string())),
            Err(_) => Err(BadId::new("team", s)),
        }
    }
}

/// A unit of a job (prefix, or prefix and cursor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnitId(pub i64);

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for UnitId {
    type Err = BadId;
    fn from_str(s: &str) -> Result<UnitId, BadId> {
        s.trim()
            .parse()
            .map(UnitId)
            .map_err(|_| BadId::new("unit", s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text_and_refuse_garbage() {
        let job = JobId::random();
        assert_eq!(job.to_string().parse::<JobId>().unwrap(), job);
        assert_eq!(serde_json::to_string(&job).unwrap(), format!("\"{job}\""));
        let bad = "nope".parse::<LeaseId>().unwrap_err();
        assert_eq!(bad.to_string(), "lease id \"nope\" is not valid");
        assert_eq!("42".parse::<UnitId>().unwrap(), UnitId(42));
        assert!("x".parse::<UnitId>().is_err());
        assert_ne!(WorkerId::random(), WorkerId::random());
        assert!("alice".parse::<AccountId>().is_ok());
        assert!("operator".parse::<AccountId>().unwrap().is_operator());
        assert!("".parse::<AccountId>().is_err());
        assert!("a b".parse::<AccountId>().is_err());
        assert!("x".repeat(65).parse::<AccountId>().is_err());
    }
}
