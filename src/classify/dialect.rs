//! Dialects: whose error conventions a provider follows. A wire says how to talk to a
//! provider; a dialect says what its errors mean, because one code can mean two
//! classes on two providers (DashScope's `insufficient_quota` is a throttle).
//!
//! Every dialect is declared once, in the `dialects!` table below: its enum variant,
//! its name in configs and scenarios, and the host suffixes it is inferred from. The
//! name list that `check`, the config loader, the scenario loader and the typo hint use
//! is `Dialect::ALL`, derived from that table, so a new dialect cannot be half-known.

use crate::core::vocab::Wire;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

macro_rules! dialects {
    ($($variant:ident => $name:literal, hosts: [$($host:literal),* $(,)?];)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Dialect {
            $($variant,)+
        }

        impl Dialect {
            /// Every dialect, in declaration order.
            pub const ALL: &'static [Dialect] = &[$(Dialect::$variant,)+];

            /// The name used in configs, scenarios, traces and output.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Dialect::$variant => $name,)+
                }
            }

            /// Host suffixes that imply this dialect: the host itself or any subdomain.
            pub fn hosts(self) -> &'static [&'static str] {
                match self {
                    $(Dialect::$variant => &[$($host),*],)+
                }
            }
        }
    };
}

dialects! {
    Openai => "openai", hosts: ["api.openai.com"];
    Azure => "azure", hosts: ["openai.azure.com", "cognitiveservices.azure.com", "services.ai.azure.com"];
    Anthropic => "anthropic", hosts: ["anthropic.com"];
    Gemini => "gemini", hosts: ["generativelanguage.googleapis.com"];
    Deepseek => "deepseek", hosts: ["deepseek.com"];
    Dashscope => "dashscope", hosts: ["aliyuncs.com"];
    Zhipu => "zhipu", hosts: ["bigmodel.cn", "z.ai"];
    Moonshot => "moonshot", hosts: ["moonshot.cn", "moonshot.ai"];
    Mistral => "mistral", hosts: ["mistral.ai"];
    Groq => "groq", hosts: ["groq.com"];
    Openrouter => "openrouter", hosts: ["openrouter.ai"];
    // ByteDance Volcengine Ark: ark.cn-beijing.volces.com, ark.ap-southeast.bytepluses.com.
    Volcengine => "volcengine", hosts: ["volces.com", "bytepluses.com"];
    Minimax => "minimax", hosts: ["minimax.chat", "minimaxi.com", "minimax.io"];
    // Only the OpenAI-compatible v2 API; the legacy aip.baidubce.com API speaks another
    // envelope (`error_code` / `error_msg`) and is out of scope.
    Qianfan => "qianfan", hosts: ["qianfan.baidubce.com"];
    Siliconflow => "siliconflow", hosts: ["siliconflow.cn", "siliconflow.com"];
    Hunyuan => "hunyuan", hosts: ["hunyuan.cloud.tencent.com"];
    Xai => "xai", hosts: ["x.ai"];
    Together => "together", hosts: ["together.xyz", "together.ai"];
    Fireworks => "fireworks", hosts: ["fireworks.ai"];
}

impl Dialect {
    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.iter().copied().find(|d| d.as_str() == s)
    }

    /// The known name nearest to `got`, when `got` looks like a typo of one.
    pub fn nearest(got: &str) -> Option<Dialect> {
        let lower = got.to_ascii_lowercase();
        if let Some(d) = Dialect::parse(&lower) {
            return Some(d); // a case slip: `MiniMax`
        }
        crate::core::suggest::nearest(&lower, Dialect::ALL.iter().map(|d| d.as_str()))
            .and_then(|n| Dialect::parse(&n))
    }

    /// What to say about a name that is not a dialect: the nearest one, and the list.
    pub fn unknown(got: &str) -> String {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
        let hint = Dialect::nearest(got)
            .map(|d| format!("; did you mean `{d}`?"))
            .unwrap_or_default();
        format!(
            "unknown dialect `{got}`{hint} (known: {})",
            names.join(", ")
        )
    }

    /// The dialect a wire implies when nothing else is known.
    pub fn of_wire(wire: Wire) -> Dialect {
        match wire {
            Wire::OpenAi => Dialect::Openai,
            Wire::Anthropic => Dialect::Anthropic,
            Wire::Gemini => Dialect::Gemini,
            // The Responses API's errors are OpenAI's.
            Wire::Responses => Dialect::Openai,
        }
    }

    /// Infers the dialect from a base URL's host; `None` when the host says nothing
    /// (a loopback mock, a private gateway).
    pub fn infer_from_url(base_url: &str) -> Option<Dialect> {
        let host = reqwest::Url::parse(base_url)
            .ok()?
            .host_str()?
            .to_ascii_lowercase();
        let is = |suffix: &str| host == suffix || host.ends_with(&format!(".{suffix}"));
        Dialect::ALL
            .iter()
            .copied()
            .find(|d| d.hosts().iter().any(|h| is(h)))
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Dialect {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Dialect {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor, so the error is raised while the scalar is being read and the YAML
        // loader can point at its line.
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Dialect;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a dialect name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dialect, E> {
                Dialect::parse(s).ok_or_else(|| E::custom(Dialect::unknown(s)))
            }
        }
        d.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_from_host() {
        let cases = [
            ("https://api.openai.com/v1", Some(Dialect::Openai)),
            (
                "https://my-res.openai.azure.com/openai/deployments/x",
                Some(Dialect::Azure),
            ),
            (
                "https://dashscope.aliyuncs.com/compatible-mode/v1",
                Some(Dialect::Dashscope),
            ),
            (
                "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
                Some(Dialect::Dashscope),
            ),
            ("https://api.deepseek.com", Some(Dialect::Deepseek)),
            ("https://open.bigmodel.cn/api/paas/v4", Some(Dialect::Zhipu)),
            ("https://api.moonshot.cn/v1", Some(Dialect::Moonshot)),
            ("https://openrouter.ai/api/v1", Some(Dialect::Openrouter)),
            ("https://api.groq.com/openai/v1", Some(Dialect::Groq)),
            ("http://127.0.0.1:8080/v1", None),
            ("https://notopenai.com.evil.example/v1", None),
            ("not a url", None),
        ];
        for (url, want) in cases {
            assert_eq!(Dialect::infer_from_url(url), want, "{url}");
        }
    }

    #[test]
    fn infers_the_eight_newer_dialects_from_their_hosts() {
        let cases = [
            (
                "https://ark.cn-beijing.volces.com/api/v3",
                Dialect::Volcengine,
            ),
            (
                "https://ark.ap-southeast.bytepluses.com/api/v3",
                Dialect::Volcengine,
            ),
            ("https://api.minimax.chat/v1", Dialect::Minimax),
            ("https://api.minimaxi.com/v1", Dialect::Minimax),
            ("https://api.minimax.io/v1", Dialect::Minimax),
            ("https://qianfan.baidubce.com/v2", Dialect::Qianfan),
            ("https://api.siliconflow.cn/v1", Dialect::Siliconflow),
            ("https://api.siliconflow.com/v1", Dialect::Siliconflow),
            ("https://api.hunyuan.cloud.tencent.com/v1", Dialect::Hunyuan),
            ("https://api.x.ai/v1", Dialect::Xai),
            ("https://api.together.xyz/v1", Dialect::Together),
            ("https://api.fireworks.ai/inference/v1", Dialect::Fireworks),
        ];
        for (url, want) in cases {
            assert_eq!(Dialect::infer_from_url(url), Some(want), "{url}");
        }
        // The legacy Qianfan API and look-alike hosts are not inferred.
        for url in [
            "https://aip.baidubce.com/rpc/2.0/ai_custom/v1",
            "https://api.z.ai.evil.example/v1",
            "https://notx.ai/v1",
            "https://minimax.io.example.com/v1",
        ] {
            assert_ne!(
                Dialect::infer_from_url(url),
                Some(Dialect::Qianfan),
                "{url}"
            );
            assert_ne!(Dialect::infer_from_url(url), Some(Dialect::Xai), "{url}");
            assert_ne!(
                Dialect::infer_from_url(url),
                Some(Dialect::Minimax),
                "{url}"
            );
        }
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        assert_eq!(Dialect::ALL.len(), 19);
        for d in Dialect::ALL {
            assert_eq!(Dialect::parse(d.as_str()), Some(*d));
            let yaml = serde_yaml::to_string(d).unwrap();
            assert_eq!(serde_yaml::from_str::<Dialect>(&yaml).unwrap(), *d);
        }
        let mut names: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Dialect::ALL.len());
    }

    /// The README's table of dialects names every dialect with each of its hosts.
    #[test]
    fn the_readme_lists_every_dialect_and_its_hosts() {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
        let table = readme
            .split("## Dialects")
            .nth(1)
            .expect("README has a Dialects section");
        for d in Dialect::ALL {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| `{d}` |")))
                .unwrap_or_else(|| panic!("README lists no row for `{d}`"));
            for h in d.hosts() {
                assert!(
                    row.contains(&format!("`{h}`")),
                    "{d}: {h} missing from {row}"
                );
            }
        }
    }

    #[test]
    fn a_typo_in_a_dialect_name_suggests_the_nearest() {
        for (typo, want) in [
            ("volcengin", Dialect::Volcengine),
            ("minmax", Dialect::Minimax),
            ("MiniMax", Dialect::Minimax),
            ("qianfna", Dialect::Qianfan),
            ("siliconflwo", Dialect::Siliconflow),
            ("hunyaun", Dialect::Hunyuan),
            ("togther", Dialect::Together),
            ("firework", Dialect::Fireworks),
            ("dashscop", Dialect::Dashscope),
        ] {
            assert_eq!(Dialect::nearest(typo), Some(want), "{typo}");
        }
        assert_eq!(Dialect::nearest("completely-different"), None);
        let err = serde_yaml::from_str::<Dialect>("volcengin").unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown dialect `volcengin`; did you mean `volcengine`?"),
            "{err}"
        );
    }
}
