//! Every state, status and verdict the fleet reports, as enums. Each has one text form,
//! used in JSON, in the database and in logs ([`ReportStatus::as_str`] and its `FromStr`),
//! and one wire form (the matching `e2fleet.v2` enum, see [`crate::convert`]).

/// A text that names no value of the enum.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {kind}")]
pub struct UnknownState {
    /// Which enum.
    pub kind: &'static str,
    /// The text given.
    pub value: String,
}

/// Declares an enum with one text form: `as_str`, `Display`, `FromStr` (an
/// [`UnknownState`] for any other text), serde as that text, and `ALL`. The fleet's states
/// here and the coordinator's stored states are declared with it; a crate that uses it
/// needs `serde` (with `derive`) among its dependencies.
#[macro_export]
macro_rules! text_enum {
    ($(#[$doc:meta])* $name:ident, $kind:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The one text form (JSON, database, logs).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::api::UnknownState;
            fn from_str(s: &str) -> Result<$name, $crate::api::UnknownState> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err($crate::api::UnknownState { kind: $kind, value: s.chars().take(64).collect() }),
                }
            }
        }
    };
}

text_enum!(
    /// What became of a report.
    ReportStatus, "report status" {
        /// The result decided its unit and entered the job's totals.
        Accepted = "accepted",
        /// It agrees with the accepted result (a cross-check or a late run); counted once.
        Replica = "replica",
        /// The same result was already recorded on this lease.
        Duplicate = "duplicate",
        /// Recorded; the unit waits for more agreeing runs.
        PendingCheck = "pending_check",
        /// It disagrees with another run; a deciding run was asked for.
        Mismatch = "mismatch",
        /// A quorum decided against it.
        Wrong = "wrong",
        /// Refused: it failed verification, or its unit was cancelled.
        Rejected = "rejected",
        /// Too late to count, and no fault of its worker: another run covers the unit, the
        /// unit changed since the lease expired, or a run stopped short that nothing can
        /// be compared with (the unit is run whole instead). Nothing counted.
        Late = "late",
    }
);

impl ReportStatus {
    /// Whether the unit is decided after this report (so the job may be complete).
    pub fn decides_unit(self) -> bool {
        matches!(
            self,
            ReportStatus::Accepted | ReportStatus::Replica | ReportStatus::Wrong
        )
    }
}

text_enum!(
    /// How a verification result compares with its unit's exact result.
    Verdict, "verdict" {
        /// Equal to the exact result.
        Agrees = "agrees",
        /// Different from the exact result (upper case: it is the one to notice).
        Disagrees = "DISAGREES",
        /// No exact result is known yet (fixed when two hardware classes agree).
        Pending = "pending",
        /// Not run (matrix cells only).
        NotRun = "not run",
    }
);

text_enum!(
    /// A job's lifecycle state.
    JobState, "job state" {
        /// Units are being leased and walked.
        Running = "running",
        /// Every unit is decided; the totals are final.
        Complete = "complete",
        /// Cancelled by an operator.
        Cancelled = "cancelled",
    }
);

text_enum!(
    /// A worker's state as the fleet sees it.
    WorkerState, "worker state" {
        /// Seen recently, holding leases.
        Online = "online",
        /// Seen recently, holding none.
        Idle = "idle",
        /// Not seen for two lease periods.
        Offline = "offline",
        /// Refused work after wrong results.
        Quarantined = "quarantined",
    }
);

text_enum!(
    /// Whose an account is.
    AccountKind, "account kind" {
        /// The operator's own (`E2FLEET_ENROLL_TOKEN`): trusted, results count at once.
        Operator = "operator",
        /// A volunteer's: results count when another account agrees, or once it has earned
        /// trust.
        Volunteer = "volunteer",
    }
);

text_enum!(
    /// What the coordinator made of a stored result.
    ResultVerdict, "result verdict" {
        /// Recorded; its unit waits for more agreeing runs.
        Pending = "pending",
        /// The result counted in the job's totals.
        Accepted = "accepted",
        /// Agrees with the accepted result (counted once, through it).
        Agree = "agree",
        /// Failed verification or lost a quorum.
        Wrong = "wrong",
        /// Not counted: its account was revoked or quarantined before another account
        /// confirmed it.
        Void = "void",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_round_trip_and_match_json() {
        for s in ReportStatus::ALL {
            assert_eq!(s.as_str().parse::<ReportStatus>().unwrap(), *s);
            assert_eq!(
                serde_json::to_string(s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        for v in Verdict::ALL {
            assert_eq!(v.as_str().parse::<Verdict>().unwrap(), *v);
        }
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), *s);
        }
        for s in WorkerState::ALL {
            assert_eq!(s.as_str().parse::<WorkerState>().unwrap(), *s);
        }
        for s in ResultVerdict::ALL {
            assert_eq!(s.as_str().parse::<ResultVerdict>().unwrap(), *s);
        }
        assert!("ACCEPTED".parse::<ReportStatus>().is_err());
        assert!(ReportStatus::Replica.decides_unit());
        assert!(!ReportStatus::Mismatch.decides_unit());
    }
}
