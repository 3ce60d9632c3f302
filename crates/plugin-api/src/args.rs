//! Plugin specs as QEMU's `-plugin` takes them: `name,key=value,...`.

use crate::PluginError;

/// A parsed plugin spec: the plugin's name and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSpec {
    /// The plugin's registered name.
    pub name: String,
    /// Its arguments, in order.
    pub args: PluginArgs,
}

impl PluginSpec {
    /// Parses `name[,key=value]...`. Every argument must have a key and a
    /// value; keys may repeat (readers see the last, or all with
    /// [`PluginArgs::all`]).
    pub fn parse(spec: &str) -> Result<PluginSpec, PluginError> {
        let bad = |reason: &str| PluginError::BadSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default().trim();
        if name.is_empty() {
            return Err(bad("the plugin name is empty"));
        }
        let mut pairs = Vec::new();
        for part in parts {
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(&format!("argument {part:?} is not key=value")));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(bad(&format!("argument {part:?} has an empty key")));
            }
            pairs.push((key.to_owned(), value.trim().to_owned()));
        }
        Ok(PluginSpec {
            name: name.to_owned(),
            args: PluginArgs {
                plugin: name.to_owned(),
                pairs,
            },
        })
    }
}

/// A plugin's `key=value` arguments, with typed readers whose errors name
/// the plugin and the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginArgs {
    plugin: String,
    pairs: Vec<(String, String)>,
}

impl PluginArgs {
    /// Arguments for `plugin` from `(key, value)` pairs.
    pub fn new<K: Into<String>, V: Into<String>>(
        plugin: &str,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        PluginArgs {
            plugin: plugin.to_owned(),
            pairs: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The `(key, value)` pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The last value given for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value given for `key`, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn bad(&self, key: &str, reason: String) -> PluginError {
        PluginError::BadArgument {
            plugin: self.plugin.clone(),
            key: key.to_owned(),
            reason,
        }
    }

    /// Fails on any key not in `known`, so a typo is an error rather than
    /// silently ignored.
    pub fn check_known(&self, known: &[&str]) -> Result<(), PluginError> {
        match self
            .pairs
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            Some((k, _)) => {
                Err(self.bad(k, format!("unknown argument (known: {})", known.join(", "))))
            }
            None => Ok(()),
        }
    }

    /// A boolean (`on/off`, `true/false`, `yes/no`, `y/n`, `1/0`), or `default`.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, PluginError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "on" | "true" | "yes" | "y" | "1" => Ok(true),
                "off" | "false" | "no" | "n" | "0" => Ok(false),
                _ => Err(self.bad(
                    key,
                    format!("{v:?} is not a boolean (use on/off or true/false)"),
                )),
            },
        }
    }

    /// An unsigned integer (decimal, or hex with `0x`) within `range`, or `default`.
    pub fn u64_in(
        &self,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, PluginError> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse::<u64>(),
        };
        match parsed {
            Ok(n) if range.contains(&n) => Ok(n),
            Ok(n) => Err(self.bad(
                key,
                format!("{n} is outside {}..={}", range.start(), range.end()),
            )),
            Err(_) => Err(self.bad(key, format!("{v:?} is not an unsigned integer"))),
        }
    }

    /// One of `choices`, or `default`.
    pub fn choice<'c>(
        &self,
        key: &str,
        default: &'c str,
        choices: &[&'c str],
    ) -> Result<&'c str, PluginError> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        choices
            .iter()
            .find(|c| c.eq_ignore_ascii_case(v))
            .copied()
            .ok_or_else(|| self.bad(key, format!("{v:?} is not one of {}", choices.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_and_pairs() -> Result<(), PluginError> {
        let spec = PluginSpec::parse("cache,dcachesize=8192, dassoc = 4,inline=on")?;
        assert_eq!(spec.name, "cache");
        assert_eq!(spec.args.get("dassoc"), Some("4"));
        assert_eq!(spec.args.u64_in("dcachesize", 0, 1..=1 << 30)?, 8192);
        assert!(spec.args.bool("inline", false)?);
        assert!(!spec.args.bool("missing", false)?);
        Ok(())
    }

    #[test]
    fn rejects_malformed_specs() {
        assert!(matches!(
            PluginSpec::parse(""),
            Err(PluginError::BadSpec { .. })
        ));
        assert!(matches!(
            PluginSpec::parse(",a=1"),
            Err(PluginError::BadSpec { .. })
        ));
        assert!(matches!(
            PluginSpec::parse("insn,inline"),
            Err(PluginError::BadSpec { .. })
        ));
        assert!(matches!(
            PluginSpec::parse("insn,=1"),
            Err(PluginError::BadSpec { .. })
        ));
    }

    #[test]
    fn typed_readers_name_the_bad_key() -> Result<(), PluginError> {
        let args = PluginSpec::parse("mem,inline=maybe,n=0x10,m=-1,rw=w,rw=r")?.args;
        let err = args
            .bool("inline", false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("mem") && err.contains("inline") && err.contains("maybe"),
            "{err}"
        );
        assert_eq!(args.u64_in("n", 0, 0..=100)?, 16);
        assert!(args.u64_in("n", 0, 0..=15).is_err());
        assert!(args.u64_in("m", 0, 0..=15).is_err());
        assert_eq!(args.choice("rw", "rw", &["r", "w", "rw"])?, "r");
        assert_eq!(args.all("rw").collect::<Vec<_>>(), ["w", "r"]);
        assert!(args.check_known(&["inline", "n", "m"]).is_err());
        assert!(args.check_known(&["inline", "n", "m", "rw"]).is_ok());
        Ok(())
    }
}
