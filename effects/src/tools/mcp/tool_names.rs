//! Tool names as providers accept them.

use std::collections::BTreeMap;

/// `name` if providers accept it, else a close name they accept that is not taken yet.
pub(super) fn allowed_name(name: &str, taken: &BTreeMap<String, String>) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if base.is_empty() {
        base.push_str("tool");
    }
    if !taken.contains_key(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = 64 - suffix.len();
            let stem: String = base.chars().take(keep).collect();
            format!("{stem}{suffix}")
        })
        .find(|candidate| !taken.contains_key(candidate))
        .unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_mapped_to_the_allowed_set_without_clashes() {
        let mut taken = BTreeMap::new();
        assert_eq!(allowed_name("read_file", &taken), "read_file");
        assert_eq!(allowed_name("fs.read", &taken), "fs_read");
        taken.insert("fs_read".to_owned(), "fs.read".to_owned());
        assert_eq!(allowed_name("fs/read", &taken), "fs_read_2");
        assert_eq!(allowed_name(&"x".repeat(80), &taken).len(), 64);
        assert_eq!(allowed_name("", &taken), "tool");
    }
}
