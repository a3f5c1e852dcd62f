//! What `weir rules check FILE` reports about a rule set without running it: rules by kind and
//! action, the memory of the exact table and of the payload automaton, the wildcard tuples, and
//! how many drop rules the kernel's socket filter could run.

use std::collections::BTreeMap;

use weir_packet::LinkType;

use crate::{BuildError, Engine, Match, RuleSet, Verdict};

/// The snap length a set is compiled for when checked (the largest libpcap takes).
const CHECK_SNAPLEN: u32 = 262_144;

/// Kernel drop rules considered at most (as live capture does).
const KERNEL_LIMIT: usize = 64;

/// A rule set, counted and compiled (for Ethernet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Rules in the set.
    pub rules: usize,
    /// Exact rules.
    pub exact: u64,
    /// Wildcard rules.
    pub wild: u64,
    /// Wildcard rules with payload patterns.
    pub wild_with_payload: u64,
    /// Wildcard rules with byte matches.
    pub wild_with_bytes: u64,
    /// Wildcard rules with a `bpf` match.
    pub wild_with_bpf: u64,
    /// Rules by action (`pass`, `drop`, `slice`, `sample`, `cutoff`, `learn`, `tag`, `no
    /// verdict`); a rule that tags or learns besides its verdict counts twice.
    pub actions: BTreeMap<&'static str, u64>,
    /// The set drops what no rule matches.
    pub default_drop: bool,
    /// Bytes of the exact table.
    pub exact_table_bytes: usize,
    /// Tuples of the wildcard rules' search structure.
    pub tuples: usize,
    /// Bytes of the payload automaton.
    pub pattern_bytes: usize,
    /// Exact drop rules the kernel's socket filter could run.
    pub kernel_exact: usize,
    /// Wildcard drop rules the kernel's socket filter could run.
    pub kernel_wild: usize,
}

impl Check {
    /// Counts `set` and compiles it for Ethernet; an error is the compiler's (a `bpf` term
    /// libpcap refuses, an id used twice...).
    pub fn new(set: &RuleSet) -> Result<Check, BuildError> {
        let (mut exact, mut wild, mut payload, mut bytes, mut bpf) = (0, 0, 0, 0, 0);
        let mut actions: BTreeMap<&'static str, u64> = BTreeMap::new();
        for r in &set.rules {
            match &r.matcher {
                Match::Exact(_) => exact += 1,
                Match::Wild(m) => {
                    wild += 1;
                    payload += u64::from(!m.payload.is_empty());
                    bytes += u64::from(!m.bytes.is_empty());
                    bpf += u64::from(m.bpf.is_some());
                }
            }
            let a = &r.action;
            let verdict = match a.verdict {
                Some(Verdict::Pass) => "pass",
                Some(Verdict::Drop) => "drop",
                Some(Verdict::Slice(_)) => "slice",
                Some(Verdict::Sample(_)) => "sample",
                Some(Verdict::Cutoff { .. }) => "cutoff",
                None if a.learn.is_some() => "learn",
                None => "no verdict",
            };
            *actions.entry(verdict).or_default() += 1;
            if a.tag.is_some() {
                *actions.entry("tag").or_default() += 1;
            }
            if a.learn.is_some() && a.verdict.is_some() {
                *actions.entry("learn").or_default() += 1;
            }
        }
        let engine = Engine::new(set.clone(), LinkType::ETHERNET, CHECK_SNAPLEN)?;
        let (_, exact_table_bytes) = engine.exact_size();
        let (_, tuples) = engine.wild_size();
        let kernel = engine.kernel_drops(KERNEL_LIMIT);
        Ok(Check {
            rules: set.rules.len(),
            exact,
            wild,
            wild_with_payload: payload,
            wild_with_bytes: bytes,
            wild_with_bpf: bpf,
            actions,
            default_drop: set.options.default_drop,
            exact_table_bytes,
            tuples,
            pattern_bytes: engine.pattern_memory_bytes(),
            kernel_exact: kernel.exact,
            kernel_wild: kernel.wild,
        })
    }

    /// The default action's name.
    pub fn default_name(&self) -> &'static str {
        if self.default_drop {
            "drop"
        } else {
            "pass"
        }
    }

    /// The report of `weir rules check` on `file` as text (lines ending in newlines).
    pub fn text(&self, file: &str) -> String {
        let acts: Vec<String> = self
            .actions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "{file}: {} rules: {} exact, {} wildcard ({} with payload patterns, {} with byte \
             matches, {} with BPF) in {} tuples; default {}\n\
             actions: {}\n\
             exact table: {} ({} bytes); payload automaton: {} bytes\n\
             kernel: {} exact and {} wildcard drop rules could run in the socket filter\n",
            self.rules,
            self.exact,
            self.wild,
            self.wild_with_payload,
            self.wild_with_bytes,
            self.wild_with_bpf,
            self.tuples,
            self.default_name(),
            acts.join(", "),
            weir_packet::output::human_bytes(self.exact_table_bytes as u64),
            self.exact_table_bytes,
            self.pattern_bytes,
            self.kernel_exact,
            self.kernel_wild,
        )
    }

    /// The report as JSON (`weir rules check --json`), naming `file`.
    pub fn json(&self, file: &str) -> serde_json::Value {
        serde_json::json!({
            "file": file,
            "rules": self.rules,
            "exact": self.exact,
            "wild": self.wild,
            "wild_with_payload": self.wild_with_payload,
            "wild_with_bytes": self.wild_with_bytes,
            "wild_with_bpf": self.wild_with_bpf,
            "actions": self.actions,
            "default": self.default_name(),
            "exact_table_bytes": self.exact_table_bytes,
            "tuples": self.tuples,
            "pattern_bytes": self.pattern_bytes,
            "kernel_exact": self.kernel_exact,
            "kernel_wild": self.kernel_wild,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counted by hand: two exact rules, three wildcard ones (a payload pattern, a `bpf`), the
    /// actions (a tag counts besides its verdict), and the drop rules the kernel can run.
    #[test]
    fn a_set_counted_by_hand() {
        let set = RuleSet::parse(
            "default drop\n\
             exact tcp 10.0.0.1:1 10.0.0.2:2 -> drop\n\
             exact udp 10.0.0.1:53 10.0.0.3:53 -> pass\n\
             proto tcp dport 80 -> tag web pass\n\
             payload \"GET \" -> slice 64\n\
             bpf \"udp port 5353\" -> drop\n",
        )
        .unwrap();
        let c = Check::new(&set).unwrap();
        assert_eq!((c.rules, c.exact, c.wild), (5, 2, 3));
        assert_eq!(
            (c.wild_with_payload, c.wild_with_bytes, c.wild_with_bpf),
            (1, 0, 1)
        );
        let actions: Vec<(&str, u64)> = c.actions.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(
            actions,
            [("drop", 2), ("pass", 2), ("slice", 1), ("tag", 1)]
        );
        assert_eq!(c.default_name(), "drop");
        // the exact TCP drop rule can run in the kernel; the `bpf` drop rule cannot: the exact
        // UDP rule and the earlier TCP rule keep packets it could match (kernel.rs)
        assert_eq!((c.kernel_exact, c.kernel_wild), (1, 0));
        assert!(c.exact_table_bytes > 0 && c.pattern_bytes > 0);
        assert_eq!(c.json("f")["actions"]["drop"], 2);
    }
}
