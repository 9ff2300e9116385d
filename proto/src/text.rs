//! Numbers as the programs print them for people: counts with thousands separators and
//! nouns that agree with them. JSON output keeps plain numbers.

/// `n` with a comma between thousands: `3,577,121,570`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` and the noun that agrees with it: `1 solution`, `260 solutions`, with thousands
/// separators.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(3_577_121_570), "3,577,121,570");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(count(1, "solution", "solutions"), "1 solution");
        assert_eq!(count(260, "solution", "solutions"), "260 solutions");
        assert_eq!(count(0, "solution", "solutions"), "0 solutions");
    }
}
