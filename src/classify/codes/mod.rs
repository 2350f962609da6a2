//! Each dialect's own code table, one file a dialect: read first, so that one code
//! can mean two classes on two providers (DashScope's `insufficient_quota` is a
//! throttle). A dialect with no table of its own reads only the shared codes.

use crate::classify::dialect::Dialect;
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

mod anthropic;
mod azure;
mod dashscope;
mod gemini;
mod groq;
mod hunyuan;
mod minimax;
mod mistral;
mod moonshot;
mod openrouter;
mod qianfan;
mod siliconflow;
mod together;
mod volcengine;
mod xai;
mod zhipu;

pub fn dialect_rule(dialect: Dialect, status: u16, e: &ErrorFields) -> Option<Class> {
    match dialect {
        Dialect::Dashscope => dashscope::class_of(status, e),
        Dialect::Gemini => gemini::class_of(status, e),
        Dialect::Anthropic => anthropic::class_of(status, e),
        Dialect::Azure => azure::class_of(e),
        Dialect::Zhipu => zhipu::class_of(e),
        Dialect::Moonshot => moonshot::class_of(e),
        Dialect::Groq => groq::class_of(status, e),
        Dialect::Openrouter => openrouter::class_of(status, e),
        Dialect::Mistral => mistral::class_of(e),
        Dialect::Volcengine => volcengine::class_of(e),
        Dialect::Minimax => minimax::class_of(e),
        Dialect::Qianfan => qianfan::class_of(e),
        Dialect::Siliconflow => siliconflow::class_of(e),
        Dialect::Hunyuan => hunyuan::class_of(e),
        Dialect::Xai => xai::class_of(status, e),
        Dialect::Together => together::class_of(status, e),
        // Fireworks: OpenAI-shaped bodies; only its 412 means something of its own
        // (`dialect_status`).
        Dialect::Openai | Dialect::Deepseek | Dialect::Fireworks => None,
    }
}
