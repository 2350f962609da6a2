//! Dialects: whose error conventions a provider follows. A wire says how to talk to a
//! provider; a dialect says what its errors mean, because one code can mean two
//! classes on two providers (DashScope's `insufficient_quota` is a throttle).

use crate::vocab::Wire;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Openai,
    Azure,
    Anthropic,
    Gemini,
    Deepseek,
    Dashscope,
    Zhipu,
    Moonshot,
    Mistral,
    Groq,
    Openrouter,
}

impl Dialect {
    pub const ALL: &'static [Dialect] = &[
        Dialect::Openai,
        Dialect::Azure,
        Dialect::Anthropic,
        Dialect::Gemini,
        Dialect::Deepseek,
        Dialect::Dashscope,
        Dialect::Zhipu,
        Dialect::Moonshot,
        Dialect::Mistral,
        Dialect::Groq,
        Dialect::Openrouter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Openai => "openai",
            Dialect::Azure => "azure",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
            Dialect::Deepseek => "deepseek",
            Dialect::Dashscope => "dashscope",
            Dialect::Zhipu => "zhipu",
            Dialect::Moonshot => "moonshot",
            Dialect::Mistral => "mistral",
            Dialect::Groq => "groq",
            Dialect::Openrouter => "openrouter",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.iter().copied().find(|d| d.as_str() == s)
    }

    /// The dialect a wire implies when nothing else is known.
    pub fn of_wire(wire: Wire) -> Dialect {
        match wire {
            Wire::OpenAi => Dialect::Openai,
            Wire::Anthropic => Dialect::Anthropic,
            Wire::Gemini => Dialect::Gemini,
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
        let table: &[(&str, Dialect)] = &[
            ("api.openai.com", Dialect::Openai),
            ("openai.azure.com", Dialect::Azure),
            ("cognitiveservices.azure.com", Dialect::Azure),
            ("services.ai.azure.com", Dialect::Azure),
            ("anthropic.com", Dialect::Anthropic),
            ("generativelanguage.googleapis.com", Dialect::Gemini),
            ("deepseek.com", Dialect::Deepseek),
            ("aliyuncs.com", Dialect::Dashscope),
            ("bigmodel.cn", Dialect::Zhipu),
            ("z.ai", Dialect::Zhipu),
            ("moonshot.cn", Dialect::Moonshot),
            ("moonshot.ai", Dialect::Moonshot),
            ("mistral.ai", Dialect::Mistral),
            ("groq.com", Dialect::Groq),
            ("openrouter.ai", Dialect::Openrouter),
        ];
        table.iter().find(|(s, _)| is(s)).map(|(_, d)| *d)
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
}
