//! A LiteLLM proxy `config.yaml`, read as it is: translated into the text of the
//! equivalent pool config, which the one pool-config parser then reads. A translation
//! rather than a second schema, so there is one set of checks, and `poolctl import
//! litellm FILE` prints exactly what every other command runs on.
//!
//! Each line of the text that came from a LiteLLM field ends in `# from FILE:LINE
//! FIELD`; a problem the pool-config parser finds on that line is reported at the
//! LiteLLM line ([`Import::remap`]). What has no equivalent is named once, with its line,
//! as "not used by poolctl" (a warning, never an error). Secrets never enter the text:
//! a literal `api_key` (or `master_key`, or a value of `environment_variables`) is held
//! as a [`Secret`] under a variable name the text gives, and the Redis password of
//! `router_settings` is added to `state` only when the config is loaded.
//!
//! Pure: the environment is passed in (for `os.environ/VAR` values other than keys).

use crate::classify::dialect::Dialect;
use crate::config::pool::{ConfigError, PoolConfig};
use crate::config::problems;
use crate::config::yaml::{self, YamlError};
use crate::core::secret::Secret;
use crate::core::vocab::Wire;
use indexmap::IndexMap;
use serde_path_to_error::Segment;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What LiteLLM calls a value read from the environment.
const ENV_PREFIX: &str = "os.environ/";

/// The variable the text names for a literal `master_key` (held in memory).
pub const MASTER_KEY_VAR: &str = "LITELLM_MASTER_KEY";

/// Whether `text` is a LiteLLM proxy config: a YAML map with a top-level `model_list`.
/// A scan of the lines, not a parse: it runs before the limits every load holds
/// (size, depth) are checked, so it must be linear whatever the text.
pub fn is_litellm(text: &str) -> bool {
    // Or one whose models come from `include:` files (a pool config has no `include`).
    text.lines().any(|l| {
        [
            "model_list:",
            "\"model_list\":",
            "'model_list':",
            "include:",
        ]
        .iter()
        .any(|k| l.starts_with(k))
    })
}

/// The field of `read` that `key` may be a typo of: one edit away (a letter more,
/// less, wrong, or two swapped; case aside), or two for a long name. Stricter than the
/// suggestions elsewhere, for most fields poolctl does not read are LiteLLM's own
/// (`api_type` is four edits from `api_base`).
fn typo_of<'a>(key: &str, read: &[&'a str]) -> Option<&'a str> {
    // LiteLLM's own fields that sit that near one poolctl reads.
    const LITELLM_OWN: &[&str] = &["callbacks"];
    if key.len() < 3 || read.contains(&key) || LITELLM_OWN.contains(&key) {
        return None;
    }
    let lower = key.to_lowercase();
    read.iter().copied().find(|name| {
        let d = strsim::osa_distance(&lower, name);
        d <= 1 || (d <= 2 && name.len() >= 8 && lower.len() >= 8)
    })
}

/// The `litellm_params` of a deployment poolctl reads.
const PARAMS: &[&str] = &[
    "model",
    "api_base",
    "base_url",
    "api_key",
    "api_version",
    "timeout",
    "stream_timeout",
    "rpm",
    "tpm",
    "weight",
];

/// The `model_info` of a deployment poolctl reads.
const MODEL_INFO: &[&str] = &[
    "id",
    "mode",
    "max_input_tokens",
    "max_tokens",
    "max_output_tokens",
    "supports_vision",
    "supports_function_calling",
    "supports_response_schema",
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_read_input_token_cost",
];

/// The `router_settings` of LiteLLM's Redis that poolctl reads.
const REDIS_SETTINGS: [&str; 5] = [
    "redis_host",
    "redis_port",
    "redis_password",
    "redis_url",
    "redis_db",
];

/// Every `router_settings` / `litellm_settings` key poolctl reads.
const SETTINGS: &[&str] = &[
    "timeout",
    "request_timeout",
    "stream_timeout",
    "num_retries",
    "allowed_fails",
    "cooldown_time",
    "routing_strategy",
    "fallbacks",
    "context_window_fallbacks",
    "content_policy_fallbacks",
    "default_fallbacks",
    "model_group_alias",
    "max_fallbacks",
    "redis_host",
    "redis_port",
    "redis_password",
    "redis_url",
    "redis_db",
];

/// The top-level keys a LiteLLM config is read by. (`include` is read, and taken out,
/// before: one an included file holds is not read, and is named unused.)
const TOP_LEVEL: &[&str] = &[
    "model_list",
    "router_settings",
    "litellm_settings",
    "general_settings",
    "environment_variables",
];

/// What a LiteLLM config none of whose deployments poolctl can call is told.
pub const NO_DEPLOYMENT: &str = "no deployment poolctl can call";

/// The most `include:` files one config reads.
const MAX_INCLUDES: usize = 64;

/// LiteLLM's `include:` (one file or a list, relative to the config's folder): each
/// file's top-level keys join `root`, a list extending the one already there and any
/// other value replacing it, as LiteLLM's proxy reads them; `include` itself goes. An
/// included file is read under the same limits as the config; one that cannot be read
/// is an error naming it, for its model groups would be missing.
fn include_files(file: &Path, root: &mut Mapping) -> (Vec<YamlError>, Sources) {
    let mut errors = Vec::new();
    let mut sources = Sources::default();
    let Some(listed) = root.remove("include") else {
        return (errors, sources);
    };
    let names: Vec<String> = match &listed {
        Value::Sequence(items) => items.iter().filter_map(value_text).collect(),
        other => value_text(other).into_iter().collect(),
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    for name in names.iter().take(MAX_INCLUDES) {
        let path = dir.join(name);
        let included = yaml::read_text(&path).and_then(|text| {
            if let Some(line) = yaml::too_deep(&text, yaml::MAX_DEPTH) {
                return Err(YamlError {
                    line: Some(line),
                    ..YamlError::new(&path, "nesting deeper than the limit")
                });
            }
            let tree = yaml::tree(&text).map(|(v, _)| v).map_err(|e| {
                YamlError::new(
                    &path,
                    format!("not valid YAML: {}", yaml::strip_location(&e.to_string())),
                )
            });
            tree.map(|v| (v, text))
        });
        match included {
            Ok((Value::Mapping(m), text)) => {
                sources.files.push(Included {
                    name: file_name(&path),
                    path: path.clone(),
                    text,
                });
                let at = sources.files.len();
                for (key, value) in m {
                    let name = key_str(&key);
                    match (root.get_mut(&key), value) {
                        (Some(Value::Sequence(mine)), Value::Sequence(more)) => {
                            sources.parts.push(Part {
                                key: name,
                                file: at,
                                items: Some((mine.len(), more.len())),
                            });
                            mine.extend(more);
                        }
                        (_, value) => {
                            // Whatever held the key before is gone, its places with it.
                            sources.parts.retain(|p| p.key != name);
                            let items = value.as_sequence().map(|v| (0, v.len()));
                            sources.parts.push(Part {
                                key: name,
                                file: at,
                                items,
                            });
                            root.insert(key, value);
                        }
                    }
                }
            }
            Ok((Value::Null, _)) => {}
            Ok(_) => errors.push(YamlError::new(
                &path,
                "an included file is a map of settings",
            )),
            Err(e) => errors.push(YamlError {
                field: "include".into(),
                ..e
            }),
        }
    }
    if names.len() > MAX_INCLUDES {
        errors.push(YamlError::new(
            file,
            format!("more than {MAX_INCLUDES} `include:` files"),
        ));
    }
    (errors, sources)
}

/// Where the parts of a config merged from `include:` files came from, so each
/// finding and `# from` comment names the file and line it was written at. Before,
/// every one named the main file, at whatever line the merged path fell on there.
#[derive(Default)]
struct Sources {
    /// The included files, in order; a `Src` names them from 1 (0 is the main file).
    files: Vec<Included>,
    /// The top-level keys (or runs of a list's items) each included file gave.
    parts: Vec<Part>,
}

struct Included {
    path: PathBuf,
    name: String,
    text: String,
}

/// A top-level key an included file gave: whole, or the run `(start, len)` of the
/// merged list's items it added.
struct Part {
    key: String,
    file: usize,
    items: Option<(usize, usize)>,
}

/// The name `# from` comments cite a file by.
fn file_name(file: &Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.display().to_string())
}

/// A LiteLLM config translated: the pool-config text and what it cannot hold.
#[derive(Debug, Clone)]
pub struct Import {
    /// The file the LiteLLM config came from.
    pub file: PathBuf,
    /// The equivalent pool config, commented.
    pub text: String,
    /// What stops the mapping (an unknown fallback group, an unset `os.environ/` value).
    pub errors: Vec<YamlError>,
    /// Literal secrets in the file, and what was mapped only approximately.
    pub warnings: Vec<YamlError>,
    /// Every field poolctl does not use, once each, with its line.
    pub unused: Vec<YamlError>,
    /// Literal keys by the variable name the text gives them; the environment wins.
    secrets: BTreeMap<String, Secret>,
    /// `state` with the Redis password in it, applied at load.
    state_url: Option<Secret>,
    /// Per line of `text`, the LiteLLM file (an index of `files`) and line it came from.
    lines: Vec<Option<(usize, usize)>>,
    /// The main file, then each `include:` file.
    files: Vec<PathBuf>,
    /// Per provider, the LiteLLM file, line and field its key variable came from.
    key_origins: BTreeMap<String, crate::config::pool::KeyOrigin>,
}

impl Import {
    /// `e` (found in `text`) at the LiteLLM line its pool-config line came from.
    pub fn remap(&self, mut e: YamlError) -> YamlError {
        let source = e.line.and_then(|l| self.source_line(l));
        e.file = match source {
            Some((f, _)) => self.files[f].clone(),
            None => self.file.clone(),
        };
        e.line = source.map(|(_, l)| l);
        e.column = None;
        // A key variable is the LiteLLM file's `api_key` (or the `model` whose default
        // variable it is), not the translation's `api_key_env`.
        let provider = e
            .field
            .strip_prefix("providers.")
            .and_then(|f| f.strip_suffix(".api_key_env"));
        if let Some(origin) = provider.and_then(|p| self.key_origins.get(p)) {
            e.field = origin.field.clone();
        }
        e
    }

    /// The LiteLLM line of line `l` (1-based) of `text`: its own `# from`, else the
    /// next line's within the same block (a key line is followed by its fields).
    fn source_line(&self, l: usize) -> Option<(usize, usize)> {
        let i = l.checked_sub(1)?;
        (i..self.lines.len().min(i + 8)).find_map(|j| self.lines[j])
    }

    /// Gives `config` (parsed from `text`) what the text does not hold: the literal
    /// keys, and the Redis password in `state`.
    pub fn apply(&self, config: &mut PoolConfig) {
        for (var, s) in &self.secrets {
            config.inline_keys.insert(var.clone(), s.clone());
        }
        if let Some(url) = &self.state_url {
            config.state = Some(PathBuf::from(url.expose()));
        }
        config.key_origins = self.key_origins.clone();
    }

    /// Every warning a command prints when it loads the file: the literal secrets and
    /// approximations, then the unused fields.
    pub fn notices(&self) -> impl Iterator<Item = &YamlError> {
        self.warnings.iter().chain(self.unused.iter())
    }
}

/// Reads the LiteLLM config `text` (the contents of `file`) as a pool config: the
/// translation, parsed and validated like any pool config, its errors at LiteLLM lines.
pub fn load(
    file: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(PoolConfig, Import), ConfigError> {
    let import = translate(file, text, env)?;
    if let Some(e) = import.errors.first() {
        return Err(ConfigError::Yaml(e.clone()));
    }
    let mut config = PoolConfig::parse(file, &import.text).map_err(|e| match e {
        ConfigError::Yaml(y) => ConfigError::Yaml(import.remap(y)),
        other => other,
    })?;
    import.apply(&mut config);
    Ok((config, import))
}

/// A workflow card's lines: the field as written, its source, a note.
type CardFields = Vec<(String, Src, String)>;

/// What a `model_info` value is.
enum Fact {
    Count,
    Flag,
    /// USD per token, written per million tokens.
    Price,
}

/// One piece of a path into the LiteLLM file.
#[derive(Clone)]
enum Seg {
    K(String),
    I(usize),
}

fn k(s: &str) -> Seg {
    Seg::K(s.to_string())
}

/// Where a value came from: its line and its field path in the LiteLLM file.
#[derive(Debug, Clone, Default)]
struct Src {
    line: Option<usize>,
    field: String,
    /// The file it is in: 0 the main file, else an `include:` file (`Sources`).
    file: usize,
}

/// A LiteLLM provider prefix poolctl can call: its wire, dialect, default base URL and
/// the variable LiteLLM reads its key from when `api_key` is absent.
struct Known {
    prefix: &'static str,
    wire: Wire,
    dialect: Option<Dialect>,
    base: Option<&'static str>,
    key_env: &'static str,
}

/// LiteLLM's provider prefixes with an equivalent: the OpenAI-compatible ones ride the
/// `openai` wire; their base URLs are LiteLLM's defaults.
const KNOWN: &[Known] = &[
    known(
        "openai",
        Wire::OpenAi,
        Some(Dialect::Openai),
        Some("https://api.openai.com/v1"),
        "OPENAI_API_KEY",
    ),
    known(
        "azure",
        Wire::OpenAi,
        Some(Dialect::Azure),
        None,
        "AZURE_API_KEY",
    ),
    known(
        "azure_ai",
        Wire::OpenAi,
        Some(Dialect::Azure),
        None,
        "AZURE_AI_API_KEY",
    ),
    known(
        "anthropic",
        Wire::Anthropic,
        Some(Dialect::Anthropic),
        Some("https://api.anthropic.com"),
        "ANTHROPIC_API_KEY",
    ),
    known(
        "gemini",
        Wire::Gemini,
        Some(Dialect::Gemini),
        Some("https://generativelanguage.googleapis.com"),
        "GEMINI_API_KEY",
    ),
    known(
        "deepseek",
        Wire::OpenAi,
        Some(Dialect::Deepseek),
        Some("https://api.deepseek.com/v1"),
        "DEEPSEEK_API_KEY",
    ),
    known(
        "groq",
        Wire::OpenAi,
        Some(Dialect::Groq),
        Some("https://api.groq.com/openai/v1"),
        "GROQ_API_KEY",
    ),
    known(
        "mistral",
        Wire::OpenAi,
        Some(Dialect::Mistral),
        Some("https://api.mistral.ai/v1"),
        "MISTRAL_API_KEY",
    ),
    known(
        "codestral",
        Wire::OpenAi,
        Some(Dialect::Mistral),
        Some("https://codestral.mistral.ai/v1"),
        "CODESTRAL_API_KEY",
    ),
    known(
        "openrouter",
        Wire::OpenAi,
        Some(Dialect::Openrouter),
        Some("https://openrouter.ai/api/v1"),
        "OPENROUTER_API_KEY",
    ),
    known(
        "dashscope",
        Wire::OpenAi,
        Some(Dialect::Dashscope),
        Some("https://dashscope-intl.aliyuncs.com/compatible-mode/v1"),
        "DASHSCOPE_API_KEY",
    ),
    known(
        "volcengine",
        Wire::OpenAi,
        Some(Dialect::Volcengine),
        Some("https://ark.cn-beijing.volces.com/api/v3"),
        "VOLCENGINE_API_KEY",
    ),
    known(
        "together_ai",
        Wire::OpenAi,
        Some(Dialect::Together),
        Some("https://api.together.xyz/v1"),
        "TOGETHERAI_API_KEY",
    ),
    known(
        "fireworks_ai",
        Wire::OpenAi,
        Some(Dialect::Fireworks),
        Some("https://api.fireworks.ai/inference/v1"),
        "FIREWORKS_AI_API_KEY",
    ),
    known(
        "xai",
        Wire::OpenAi,
        Some(Dialect::Xai),
        Some("https://api.x.ai/v1"),
        "XAI_API_KEY",
    ),
    known(
        "moonshot",
        Wire::OpenAi,
        Some(Dialect::Moonshot),
        Some("https://api.moonshot.ai/v1"),
        "MOONSHOT_API_KEY",
    ),
    known(
        "zai",
        Wire::OpenAi,
        Some(Dialect::Zhipu),
        Some("https://api.z.ai/api/paas/v4"),
        "ZAI_API_KEY",
    ),
    known(
        "zhipu",
        Wire::OpenAi,
        Some(Dialect::Zhipu),
        Some("https://open.bigmodel.cn/api/paas/v4"),
        "ZHIPUAI_API_KEY",
    ),
    known(
        "minimax",
        Wire::OpenAi,
        Some(Dialect::Minimax),
        Some("https://api.minimax.io/v1"),
        "MINIMAX_API_KEY",
    ),
    known(
        "cerebras",
        Wire::OpenAi,
        None,
        Some("https://api.cerebras.ai/v1"),
        "CEREBRAS_API_KEY",
    ),
    known(
        "nvidia_nim",
        Wire::OpenAi,
        None,
        Some("https://integrate.api.nvidia.com/v1"),
        "NVIDIA_NIM_API_KEY",
    ),
    known(
        "perplexity",
        Wire::OpenAi,
        None,
        Some("https://api.perplexity.ai"),
        "PERPLEXITYAI_API_KEY",
    ),
    known(
        "deepinfra",
        Wire::OpenAi,
        None,
        Some("https://api.deepinfra.com/v1/openai"),
        "DEEPINFRA_API_KEY",
    ),
    known(
        "hosted_vllm",
        Wire::OpenAi,
        None,
        None,
        "HOSTED_VLLM_API_KEY",
    ),
    known(
        "openai_like",
        Wire::OpenAi,
        None,
        None,
        "OPENAI_LIKE_API_KEY",
    ),
    known("custom_openai", Wire::OpenAi, None, None, "OPENAI_API_KEY"),
    known("lm_studio", Wire::OpenAi, None, None, "LM_STUDIO_API_KEY"),
    known("llamafile", Wire::OpenAi, None, None, "LLAMAFILE_API_KEY"),
];

const fn known(
    prefix: &'static str,
    wire: Wire,
    dialect: Option<Dialect>,
    base: Option<&'static str>,
    key_env: &'static str,
) -> Known {
    Known {
        prefix,
        wire,
        dialect,
        base,
        key_env,
    }
}

/// LiteLLM's own provider prefix for a route of `wire` whose errors follow `dialect`,
/// one this reader takes back as the same wire and dialect: what a written LiteLLM
/// config names so the dialect survives (`openai/` before a base of one's own would
/// lose it). `None` where LiteLLM has no prefix for the dialect. OpenAI and Azure are
/// `openai/`: LiteLLM's `azure/` calls the deployments URL, which the mock and poolctl's
/// Azure base (`{api_base}/openai/v1`) are not.
pub fn prefix_for(wire: Wire, dialect: Dialect) -> Option<&'static str> {
    match (wire, dialect) {
        (Wire::OpenAi, Dialect::Openai | Dialect::Azure) => Some("openai"),
        (Wire::Anthropic, _) => Some("anthropic"),
        (Wire::Gemini, _) => Some("gemini"),
        (Wire::Responses, _) => None,
        (Wire::OpenAi, d) => KNOWN
            .iter()
            .find(|kn| kn.wire == Wire::OpenAi && kn.dialect == Some(d))
            .map(|kn| kn.prefix),
    }
}

/// The provider prefix of a LiteLLM `model` and the model after it. A model without a
/// prefix is OpenAI's or Anthropic's by its name, as LiteLLM's model map has it.
fn split_model(model: &str) -> Option<(&'static Known, String)> {
    if let Some((prefix, rest)) = model.split_once('/') {
        if let Some(kn) = KNOWN.iter().find(|kn| kn.prefix == prefix) {
            return (!rest.is_empty()).then(|| (kn, rest.to_string()));
        }
    }
    let openai = [
        "gpt-",
        "chatgpt-",
        "o1",
        "o3",
        "o4",
        "text-embedding-",
        "davinci",
        "babbage",
    ];
    let prefix = if model.starts_with("claude") {
        "anthropic"
    } else if !model.contains('/') && openai.iter().any(|p| model.starts_with(p)) {
        "openai"
    } else {
        return None;
    };
    KNOWN
        .iter()
        .find(|kn| kn.prefix == prefix)
        .map(|kn| (kn, model.to_string()))
}

/// Where a provider's key comes from.
#[derive(Debug, Clone)]
enum Key {
    /// `os.environ/VAR`, or LiteLLM's default variable for the prefix.
    Env(String),
    /// A literal in the file (held in memory, never written).
    Literal(String),
}

/// One provider of the translation: every deployment with the same settings shares it.
#[derive(Debug, Clone)]
struct Provider {
    name: String,
    prefix: &'static str,
    wire: Wire,
    dialect: Option<Dialect>,
    base_url: String,
    base_src: Src,
    base_note: String,
    key: Key,
    key_src: Src,
    key_note: &'static str,
    timeout_ms: Option<(u64, Src)>,
    first_token_ms: Option<(u64, Src)>,
}

impl Provider {
    /// Two deployments share a provider when everything the provider holds is equal.
    fn same(&self, o: &Provider) -> bool {
        let key = |k: &Key| match k {
            Key::Env(v) => format!("env:{v}"),
            Key::Literal(v) => format!("lit:{v}"),
        };
        self.wire == o.wire
            && self.dialect == o.dialect
            && self.base_url == o.base_url
            && key(&self.key) == key(&o.key)
            && self.timeout_ms.as_ref().map(|t| t.0) == o.timeout_ms.as_ref().map(|t| t.0)
            && self.first_token_ms.as_ref().map(|t| t.0) == o.first_token_ms.as_ref().map(|t| t.0)
    }
}

/// One `model_list` entry poolctl can call.
#[derive(Debug, Clone)]
struct Deployment {
    group: String,
    /// Its `model_name`.
    name_src: Src,
    provider: usize,
    model: String,
    path: &'static str,
    rpm: Option<(u64, Src)>,
    tpm: Option<(u64, Src)>,
    weight: Option<(f64, Src)>,
    facts: Vec<(&'static str, String, Src)>,
    /// `model_info.id`, where it is: a fallback may name this one deployment by it.
    id: Option<(String, Src)>,
}

impl Deployment {
    fn route(&self, providers: &[Provider]) -> String {
        format!("{}/{}", providers[self.provider].name, self.model)
    }
}

/// A setting read from `router_settings` or `litellm_settings` (the first wins).
struct Setting<'v> {
    value: &'v Value,
    src: Src,
    path: Vec<Seg>,
}

struct Reader<'a> {
    file: &'a Path,
    /// The file name the comments cite.
    name: String,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// `environment_variables`: what LiteLLM sets in its environment at start.
    env_vars: BTreeMap<String, String>,
    errors: Vec<YamlError>,
    warnings: Vec<YamlError>,
    unused: Vec<YamlError>,
    secrets: BTreeMap<String, Secret>,
    /// What `include:` files gave the config.
    sources: Sources,
}

impl<'a> Reader<'a> {
    /// Where `path` of the merged config was written: its file, line and field there.
    fn src(&self, path: &[Seg]) -> Src {
        let (file, path) = self.written_at(path);
        let segs: Vec<Segment> = path
            .iter()
            .map(|s| match s {
                Seg::K(key) => Segment::Map { key: key.clone() },
                Seg::I(index) => Segment::Seq { index: *index },
            })
            .collect();
        let text = match file {
            0 => self.text,
            f => &self.sources.files[f - 1].text,
        };
        Src {
            line: problems::locate(text, &segs),
            field: yaml::render_path(&segs),
            file,
        }
    }

    /// The file `path` of the merged config comes from, and its path in that file (a
    /// list item an included file added is numbered as it is there).
    fn written_at(&self, path: &[Seg]) -> (usize, Vec<Seg>) {
        let mut own = path.to_vec();
        let Some(Seg::K(key)) = path.first() else {
            return (0, own);
        };
        // The latest part first: a later include replaced or extended what came before.
        for part in self.sources.parts.iter().rev().filter(|p| &p.key == key) {
            match (part.items, path.get(1)) {
                (Some((start, len)), Some(Seg::I(i))) => {
                    if (start..start + len).contains(i) {
                        own[1] = Seg::I(i - start);
                        return (part.file, own);
                    }
                    // Another file's item: the main file's, or an earlier include's.
                }
                _ => return (part.file, own),
            }
        }
        (0, own)
    }

    /// The path of the file `src` is in.
    fn path_of(&self, src: &Src) -> PathBuf {
        match src.file {
            0 => self.file.to_path_buf(),
            f => self.sources.files[f - 1].path.clone(),
        }
    }

    fn finding(&self, src: &Src, message: String) -> YamlError {
        YamlError {
            file: self.path_of(src),
            line: src.line,
            column: None,
            field: src.field.clone(),
            message,
        }
    }

    fn error(&mut self, src: &Src, message: String) {
        let e = self.finding(src, message);
        self.errors.push(e);
    }

    fn warn(&mut self, src: &Src, message: String) {
        let e = self.finding(src, message);
        self.warnings.push(e);
    }

    fn unused(&mut self, src: &Src, why: &str) {
        let message = if why.is_empty() {
            "not used by poolctl".to_string()
        } else {
            format!("not used by poolctl: {why}")
        };
        let e = self.finding(src, message);
        self.unused.push(e);
    }

    /// A field poolctl does not read, where `read` are the ones it does: unused, and a
    /// near miss of one of those (`api_bsae`, `fallbakcs`, `litellm_setings`) says the
    /// field it may be a typo of. Left unsaid, a typo of `api_base` sends the
    /// deployment to its provider's public host. Still a warning, never an error:
    /// LiteLLM has hundreds of fields poolctl does not read, and a real one may sit one
    /// letter from one it does (`callbacks`, `fallbacks`).
    fn unknown(&mut self, src: &Src, key: &str, read: &[&str]) {
        let why = typo_of(key, read).map(|meant| format!("did you mean `{meant}`?"));
        self.unused(src, why.as_deref().unwrap_or(""));
    }

    /// `os.environ/VAR` from the environment (then `environment_variables`).
    fn lookup(&self, var: &str) -> Option<String> {
        (self.env)(var)
            .filter(|v| !v.is_empty())
            .or_else(|| self.env_vars.get(var).cloned())
    }

    /// A string value, `os.environ/VAR` resolved; an unset variable is an error.
    fn string(&mut self, v: &Value, src: &Src) -> Option<String> {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => return None,
            _ => {
                self.error(src, "expected a text value".into());
                return None;
            }
        };
        match s.strip_prefix(ENV_PREFIX) {
            Some(var) => {
                let got = self.lookup(var);
                if got.is_none() {
                    self.error(
                        src,
                        format!("`{s}`: environment variable `{var}` is not set or is empty"),
                    );
                }
                got
            }
            None => Some(s),
        }
    }

    fn number(&mut self, v: &Value, src: &Src) -> Option<f64> {
        let s = self.string(v, src)?;
        match s.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Some(n),
            _ => {
                self.error(src, format!("`{s}` is not a number"));
                None
            }
        }
    }

    fn flag(&mut self, v: &Value, src: &Src) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => match self.string(v, src)?.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                other => {
                    self.error(src, format!("`{other}` is not true or false"));
                    None
                }
            },
        }
    }
}

/// Translates the LiteLLM config `text` (the contents of `file`). `Err` only when the
/// text is not YAML or not a LiteLLM config at all; every other problem is collected.
pub fn translate(
    file: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Import, YamlError> {
    if let Some(line) = yaml::too_deep(text, yaml::MAX_DEPTH) {
        return Err(YamlError {
            line: Some(line),
            ..YamlError::new(
                file,
                format!("nesting deeper than {} levels (the limit)", yaml::MAX_DEPTH),
            )
        });
    }
    // An integer too large for the tree reads as the float nearest it (Python reads any
    // integer): a count becomes the largest the pool config holds.
    // YAML's merge keys (`<<: *defaults`) are applied, as PyYAML applies them when
    // LiteLLM reads its config: left as a key, a deployment would lose the `api_base`
    // and key its anchor gave it, and be sent elsewhere.
    let (mut root, _) = yaml::tree(text)
        .and_then(|(mut v, huge)| v.apply_merge().map(|()| (v, huge)))
        .map_err(|e| {
            let loc = e.location();
            YamlError {
                file: file.to_path_buf(),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                field: String::new(),
                message: format!("not valid YAML: {}", yaml::strip_location(&e.to_string())),
            }
        })?;
    let (included, sources) = match root.as_mapping_mut() {
        Some(m) => include_files(file, m),
        None => (Vec::new(), Sources::default()),
    };
    let Some(root) = root.as_mapping() else {
        return Err(YamlError::new(
            file,
            "a LiteLLM config is a map with `model_list`",
        ));
    };
    let name = file_name(file);
    let mut r = Reader {
        file,
        name,
        text,
        env,
        env_vars: BTreeMap::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
        unused: Vec::new(),
        secrets: BTreeMap::new(),
        sources,
    };
    r.errors.extend(included);
    let section = |key: &str| root.get(key).and_then(Value::as_mapping);
    for (key, _) in root {
        let key = key_str(key);
        if !TOP_LEVEL.contains(&key.as_str()) {
            let src = r.src(&[k(&key)]);
            r.unknown(&src, &key, TOP_LEVEL);
        }
    }
    // `environment_variables`: LiteLLM exports them at start; here they answer
    // `os.environ/` when the process's own environment does not, and a key variable
    // among them is held like a literal key.
    if let Some(vars) = section("environment_variables") {
        for (key, v) in vars {
            let key = key_str(key);
            let src = r.src(&[k("environment_variables"), k(&key)]);
            if let Some(s) = value_text(v) {
                r.env_vars.insert(key.clone(), s.clone());
                if is_secret_name(&key) {
                    r.secrets.insert(key.clone(), Secret::new(s));
                    r.warn(
                        &src,
                        format!("a literal secret in the file (`{key}`); export {key} instead and remove it here"),
                    );
                }
            }
        }
    }
    let router = section("router_settings");
    let module = section("litellm_settings");
    let general = section("general_settings");
    // A setting in both sections: router_settings wins, as in LiteLLM's proxy.
    let mut used: Vec<(&str, String)> = Vec::new();
    let setting = |names: &[&str], used: &mut Vec<(&str, String)>, r: &Reader| {
        for (sec_name, sec) in [("router_settings", router), ("litellm_settings", module)] {
            let Some(sec) = sec else { continue };
            for name in names {
                if let Some(v) = sec.get(*name) {
                    used.push((sec_name, name.to_string()));
                    let path = vec![k(sec_name), k(name)];
                    return Some(Setting {
                        value: v,
                        src: r.src(&path),
                        path,
                    });
                }
            }
        }
        None
    };
    let timeout = setting(&["timeout", "request_timeout"], &mut used, &r);
    let stream_timeout = setting(&["stream_timeout"], &mut used, &r);
    let num_retries = setting(&["num_retries"], &mut used, &r);
    let allowed_fails = setting(&["allowed_fails"], &mut used, &r);
    let cooldown_time = setting(&["cooldown_time"], &mut used, &r);
    let strategy = setting(&["routing_strategy"], &mut used, &r);
    let fallbacks = setting(&["fallbacks"], &mut used, &r);
    let window_fallbacks = setting(&["context_window_fallbacks"], &mut used, &r);
    let policy_fallbacks = setting(&["content_policy_fallbacks"], &mut used, &r);
    let default_fallbacks = setting(&["default_fallbacks"], &mut used, &r);
    let aliases = setting(&["model_group_alias"], &mut used, &r);
    let max_fallbacks = setting(&["max_fallbacks"], &mut used, &r);
    let mut redis_keys = Vec::new();
    if let Some(sec) = router {
        for key in REDIS_SETTINGS {
            if sec.contains_key(key) {
                redis_keys.push(key);
                used.push(("router_settings", key.to_string()));
            }
        }
    }
    // The same setting written in the other section too is shadowed: named as unused.
    for (sec_name, sec) in [("router_settings", router), ("litellm_settings", module)] {
        let Some(sec) = sec else { continue };
        for (key, _) in sec {
            let key = key_str(key);
            if !used.iter().any(|(s, n)| *s == sec_name && *n == key) {
                let src = r.src(&[k(sec_name), k(&key)]);
                // `request_timeout` is the module's name for the router's `timeout`.
                let same =
                    |n: &str| n == key || [n, key.as_str()] == ["timeout", "request_timeout"];
                let shadowed = used.iter().any(|(_, n)| same(n));
                if shadowed {
                    r.unused(&src, "router_settings holds the same setting, which wins");
                } else {
                    r.unknown(&src, &key, SETTINGS);
                }
            }
        }
    }
    let mut master_key: Option<(String, Src, bool)> = None;
    if let Some(sec) = general {
        for (key, v) in sec {
            let key = key_str(key);
            let src = r.src(&[k("general_settings"), k(&key)]);
            if key == "master_key" {
                match value_text(v) {
                    Some(s) => match s.strip_prefix(ENV_PREFIX) {
                        Some(var) => master_key = Some((var.to_string(), src, false)),
                        None => {
                            r.secrets
                                .insert(MASTER_KEY_VAR.to_string(), Secret::new(s.clone()));
                            r.warn(
                                &src,
                                format!(
                                    "a literal master key in the file; export {MASTER_KEY_VAR} and write `master_key: os.environ/{MASTER_KEY_VAR}` instead"
                                ),
                            );
                            master_key = Some((MASTER_KEY_VAR.to_string(), src, true));
                        }
                    },
                    None => r.unused(&src, "empty"),
                }
            } else {
                r.unused(&src, "");
            }
        }
    }

    // Provider-wide settings from the router: the default deadlines.
    let default_timeout = timeout.as_ref().and_then(|s| {
        let n = r.number(s.value, &s.src)?;
        Some(((n * 1000.0).round() as u64, s.src.clone()))
    });
    let default_stream = stream_timeout.as_ref().and_then(|s| {
        let n = r.number(s.value, &s.src)?;
        Some(((n * 1000.0).round() as u64, s.src.clone()))
    });

    // model_list.
    let mut providers: Vec<Provider> = Vec::new();
    let mut deployments: Vec<Deployment> = Vec::new();
    // Every model_name, in order, with whether any deployment of it is served.
    let mut groups: IndexMap<String, (Src, bool)> = IndexMap::new();
    match root.get("model_list") {
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(d) = deployment(&mut r, i, item, &mut providers, &mut groups) {
                    deployments.push(d);
                }
            }
        }
        Some(Value::Null) | None => {}
        Some(_) => {
            let src = r.src(&[k("model_list")]);
            r.error(&src, "expected a list of deployments".into());
        }
    }
    if deployments.is_empty() {
        let src = r.src(&[k("model_list")]);
        r.error(
            &src,
            format!("{NO_DEPLOYMENT}: a pool config needs at least one route"),
        );
    }
    // Deadlines the router sets for every deployment that sets none of its own.
    for p in providers.iter_mut() {
        if p.timeout_ms.is_none() {
            p.timeout_ms = default_timeout.clone();
        }
        if p.first_token_ms.is_none() {
            p.first_token_ms = default_stream.clone();
        }
    }
    name_providers(&mut providers);

    // Groups: each served model_name's deployments, in file order.
    let mut members: IndexMap<String, Vec<usize>> = IndexMap::new();
    for (i, d) in deployments.iter().enumerate() {
        members.entry(d.group.clone()).or_default().push(i);
    }

    // Deployments a fallback may name by `model_info.id` (LiteLLM's "fallback to a
    // specific model id"): the id stands for that one deployment.
    let ids: IndexMap<String, usize> = deployments
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.id.as_ref().map(|(id, _)| (id.clone(), i)))
        .filter(|(id, _)| !members.contains_key(id))
        .collect();
    let targets_of_name = |fb: &str| -> Option<Vec<usize>> {
        members
            .get(fb)
            .cloned()
            .or_else(|| ids.get(fb).map(|&i| vec![i]))
    };

    // Fallbacks: model group → the groups after it.
    let mut chains: BTreeMap<String, Vec<(String, Src)>> = BTreeMap::new();
    let mut window_targets: BTreeMap<String, Vec<(String, Src)>> = BTreeMap::new();
    let mut policy_targets: BTreeMap<String, Vec<(String, Src)>> = BTreeMap::new();
    for (setting, into) in [
        (&fallbacks, &mut chains),
        (&window_fallbacks, &mut window_targets),
        (&policy_fallbacks, &mut policy_targets),
    ] {
        if let Some(s) = setting {
            fallback_map(&mut r, s, &groups, &ids, into);
        }
    }
    // An id no fallback names does nothing here.
    for d in &deployments {
        if let Some((id, src)) = &d.id {
            let named = [&chains, &window_targets, &policy_targets]
                .iter()
                .any(|m| m.values().flatten().any(|(t, _)| t == id));
            if !named {
                r.unused(src, "");
            }
        }
    }
    let mut defaults: Vec<(String, Src)> = Vec::new();
    if let Some(s) = &default_fallbacks {
        match s.value {
            Value::Sequence(list) => {
                for (j, g) in list.iter().enumerate() {
                    let mut path = s.path.clone();
                    path.push(Seg::I(j));
                    let src = r.src(&path);
                    let src = Src {
                        line: src.line.or(s.src.line),
                        ..src
                    };
                    if let Some(g) = value_text(g) {
                        if known_group(&mut r, &g, &src, &groups) {
                            defaults.push((g, src));
                        }
                    }
                }
            }
            _ => r.error(&s.src, "expected a list of model groups".into()),
        }
    }

    // How deep fallback groups are followed (LiteLLM's `max_fallbacks`, default 5).
    let depth = max_fallbacks
        .as_ref()
        .and_then(|s| r.number(s.value, &s.src))
        .map_or(5, |n| n.clamp(0.0, 64.0) as usize);

    // The group strategy.
    let least_busy = match &strategy {
        Some(s) => match value_text(s.value).as_deref() {
            Some("simple-shuffle") => false,
            Some("least-busy") => true,
            Some(other) => {
                let why = format!("`{other}`: poolctl picks a group's member by weight (`weighted`) or by `least_busy`; this one is read as `weighted`");
                r.warn(&s.src, why);
                false
            }
            None => false,
        },
        None => false,
    };

    // The card every model group's workflow carries.
    let retries = num_retries.as_ref().and_then(|s| {
        let n = r.number(s.value, &s.src)?;
        Some((n.round() as u64, s.src.clone()))
    });
    let fails = allowed_fails.as_ref().and_then(|s| {
        let n = r.number(s.value, &s.src)?;
        Some((n.round() as u64, s.src.clone()))
    });
    let cooldown = cooldown_time.as_ref().and_then(|s| {
        let n = r.number(s.value, &s.src)?;
        Some(((n * 1000.0).round() as u64, s.src.clone()))
    });

    // Redis: the fleet's shared state.
    let state = redis_state(&mut r, router, &redis_keys);

    // Writing the text.
    let mut w = Writer {
        names: std::iter::once(r.name.clone())
            .chain(r.sources.files.iter().map(|f| f.name.clone()))
            .collect(),
        lines: Vec::new(),
    };
    w.plain(&format!(
        "# poolctl pool config imported from {} (a LiteLLM proxy config)",
        r.name
    ));
    w.plain("# `# from FILE:LINE FIELD` names the LiteLLM field each line came from.");
    if let Some((var, src, literal)) = &master_key {
        let note = if *literal {
            " (a literal: held in memory, never written here)"
        } else {
            ""
        };
        w.line(&format!("serve_token_env: {}", q(var)), src, note);
    }
    if let Some((shown, src, note, _)) = &state {
        w.line(&format!("state: {}", q(shown)), src, note);
    }
    if let Some(s) = &strategy {
        let word = if least_busy { "least_busy" } else { "weighted" };
        w.line(&format!("# a group's strategy: {word}"), &s.src, "");
    }
    for var in r.env_vars.keys() {
        let src = r.src(&[k("environment_variables"), k(var)]);
        w.line(
            &format!("# ${var}: read where the file names os.environ/{var}"),
            &src,
            "",
        );
    }
    w.plain("providers:");
    for p in &providers {
        w.plain(&format!("  {}:", q(&p.name)));
        w.line(
            &format!("    wire: {}", p.wire),
            &p.base_src,
            &format!(" (LiteLLM's `{}/`)", p.prefix),
        );
        if let Some(d) = p.dialect {
            w.line(&format!("    dialect: {d}"), &p.base_src, "");
        }
        w.line(
            &format!("    base_url: {}", q(&p.base_url)),
            &p.base_src,
            &p.base_note,
        );
        match &p.key {
            Key::Env(var) => w.line(
                &format!("    api_key_env: {}", q(var)),
                &p.key_src,
                p.key_note,
            ),
            Key::Literal(_) => w.line(
                &format!("    api_key_env: {}", q(&literal_var(&p.name))),
                &p.key_src,
                " (a literal key: held in memory, never written here)",
            ),
        }
        if let Some((ms, src)) = &p.timeout_ms {
            w.line(&format!("    timeout_ms: {ms}"), src, "");
        }
        if let Some((ms, src)) = &p.first_token_ms {
            w.line(&format!("    first_token_timeout_ms: {ms}"), src, "");
        }
        if let Some((ms, src)) = &cooldown {
            w.line(&format!("    cooldown_ms: {ms}"), src, "");
            w.line(&format!("    transient_cooldown_ms: {ms}"), src, "");
        }
        if let Some((n, src)) = &fails {
            // LiteLLM cools a deployment down once it fails more than `allowed_fails`
            // times; the breaker opens on that failure.
            let open = cooldown
                .as_ref()
                .map(|(ms, _)| {
                    format!(
                        ", open_ms: {}, max_open_ms: {}",
                        ms.max(&1),
                        ms.max(&60_000)
                    )
                })
                .unwrap_or_default();
            w.line(
                &format!("    breaker: {{ consecutive_failures: {}{open} }}", n + 1),
                src,
                "",
            );
        }
    }
    w.plain("tiers:");
    for (group, idx) in &members {
        let (gsrc, _) = &groups[group];
        w.line(&format!("  {}:", q(group)), gsrc, "");
        let mut seen: Vec<String> = Vec::new();
        step(
            &mut w,
            &deployments,
            &providers,
            idx,
            gsrc,
            least_busy,
            strategy.as_ref(),
            &mut seen,
        );
        let after = fallback_order(group, &chains, &defaults, depth);
        let extra = [
            after,
            targets_of(&policy_targets, group).unwrap_or_default(),
            targets_of(&window_targets, group).unwrap_or_default(),
        ];
        for (fb, src) in extra.iter().flatten() {
            let Some(fidx) = targets_of_name(fb) else {
                continue; // a group with no served deployment: already named
            };
            step(
                &mut w,
                &deployments,
                &providers,
                &fidx,
                src,
                least_busy,
                strategy.as_ref(),
                &mut seen,
            );
        }
    }
    // Workflows: a model group's card when the router settings change one, and the
    // aliases of `model_group_alias`.
    let mut cards: Vec<(String, CardFields)> = Vec::new();
    for group in members.keys() {
        let mut fields: CardFields = Vec::new();
        if let Some((n, src)) = &retries {
            fields.push((
                format!("max_retries_per_route: {n}"),
                src.clone(),
                String::new(),
            ));
        }
        // context_window_fallbacks: LiteLLM sends a context-window error there and to
        // no other fallback, whatever it knows of their windows.
        if let Some(list) = targets_of(&window_targets, group) {
            let mut routes: Vec<String> = Vec::new();
            for (fb, _) in &list {
                for i in targets_of_name(fb).into_iter().flatten() {
                    let route = deployments[i].route(&providers);
                    if !routes.contains(&route) {
                        routes.push(route);
                    }
                }
            }
            if let (Some((_, src)), false) = (list.first(), routes.is_empty()) {
                let shown: Vec<String> = routes.iter().map(|r| q(r)).collect();
                fields.push((
                    format!("overflow_routes: [{}]", shown.join(", ")),
                    src.clone(),
                    String::new(),
                ));
            }
        }
        // content_policy_fallbacks: LiteLLM sends a blocked prompt there and to no other
        // fallback.
        if let Some(list) = targets_of(&policy_targets, group) {
            if let Some((_, src)) = list.first() {
                fields.push((
                    "on_content_policy: fallback".into(),
                    src.clone(),
                    String::new(),
                ));
                let mut routes: Vec<String> = Vec::new();
                for (fb, _) in &list {
                    for i in targets_of_name(fb).into_iter().flatten() {
                        let route = deployments[i].route(&providers);
                        if !routes.contains(&route) {
                            routes.push(route);
                        }
                    }
                }
                if !routes.is_empty() {
                    let shown: Vec<String> = routes.iter().map(|r| q(r)).collect();
                    fields.push((
                        format!("content_policy_routes: [{}]", shown.join(", ")),
                        src.clone(),
                        String::new(),
                    ));
                }
            }
        }
        if !fields.is_empty() {
            cards.push((group.clone(), fields));
        }
    }
    let mut alias_cards: Vec<(String, String, Src)> = Vec::new();
    if let Some(s) = &aliases {
        match s.value {
            Value::Mapping(m) => {
                for (alias, target) in m {
                    let alias = key_str(alias);
                    let mut path = s.path.clone();
                    path.push(k(&alias));
                    let src = r.src(&path);
                    let src = Src {
                        line: src.line.or(s.src.line),
                        ..src
                    };
                    let target = match target {
                        Value::Mapping(t) => t.get("model").and_then(value_text),
                        other => value_text(other),
                    };
                    match target {
                        Some(t) if members.contains_key(&t) => alias_cards.push((alias, t, src)),
                        Some(t) => {
                            if known_group(&mut r, &t, &src, &groups) {
                                r.warn(&src, format!("alias `{alias}`: model group `{t}` has no deployment poolctl can call; not used"));
                            }
                        }
                        None => r.error(&src, "expected a model group".into()),
                    }
                }
            }
            _ => r.error(&s.src, "expected a map of alias: model group".into()),
        }
    }
    if !cards.is_empty() || !alias_cards.is_empty() {
        w.plain("policies:");
        for (group, fields) in &cards {
            let (gsrc, _) = &groups[group];
            w.plain(&format!("  {}:", q(group)));
            w.line(&format!("    tier: {}", q(group)), gsrc, "");
            for (f, src, note) in fields {
                w.line(&format!("    {f}"), src, note);
            }
        }
        for (alias, target, src) in &alias_cards {
            w.plain(&format!("  {}:", q(alias)));
            w.line(&format!("    tier: {}", q(target)), src, "");
            if let Some((_, fields)) = cards.iter().find(|(g, _)| g == target) {
                for (f, fsrc, note) in fields {
                    w.line(&format!("    {f}"), fsrc, note);
                }
            }
        }
    }
    // models: and limits:, per route (a route in two groups: its first deployment).
    let mut seen_routes: Vec<String> = Vec::new();
    let mut facts_out: Vec<(String, &Deployment)> = Vec::new();
    for d in &deployments {
        let route = d.route(&providers);
        if !seen_routes.contains(&route) {
            seen_routes.push(route.clone());
            facts_out.push((route, d));
        }
    }
    if facts_out.iter().any(|(_, d)| !d.facts.is_empty()) {
        w.plain("models:");
        for (route, d) in &facts_out {
            if d.facts.is_empty() {
                continue;
            }
            w.plain(&format!("  {}:", q(route)));
            for (field, v, src) in &d.facts {
                w.line(&format!("    {field}: {v}"), src, "");
            }
        }
    }
    if facts_out
        .iter()
        .any(|(_, d)| d.rpm.is_some() || d.tpm.is_some())
    {
        w.plain("limits:");
        for (route, d) in &facts_out {
            if d.rpm.is_none() && d.tpm.is_none() {
                continue;
            }
            w.plain(&format!("  {}:", q(route)));
            if let Some((n, src)) = &d.rpm {
                w.line(&format!("    rpm: {n}"), src, "");
            }
            if let Some((n, src)) = &d.tpm {
                w.line(&format!("    tpm: {n}"), src, "");
            }
        }
    }
    // What was left out, once each.
    if !r.unused.is_empty() {
        w.plain("# Not used by poolctl (named once each):");
        for u in &r.unused {
            let name = file_name(&u.file);
            let at = match u.line {
                Some(l) => format!("{name}:{l}"),
                None => name,
            };
            let why = u
                .message
                .strip_prefix("not used by poolctl")
                .unwrap_or(&u.message);
            w.plain(&format!("#   {at} {}{why}", u.field));
        }
    }
    // The literal keys, under the variable names the text gives them.
    for p in &providers {
        if let Key::Literal(key) = &p.key {
            r.secrets
                .insert(literal_var(&p.name), Secret::new(key.clone()));
        }
    }
    let key_origins = providers
        .iter()
        .map(|p| {
            let origin = crate::config::pool::KeyOrigin {
                file: r.path_of(&p.key_src),
                line: p.key_src.line,
                field: p.key_src.field.clone(),
            };
            (p.name.clone(), origin)
        })
        .collect();
    let mut text = String::new();
    let mut lines = Vec::new();
    for (l, src) in w.lines {
        text.push_str(&l);
        text.push('\n');
        lines.push(src);
    }
    Ok(Import {
        file: file.to_path_buf(),
        text,
        errors: r.errors,
        warnings: r.warnings,
        unused: r.unused,
        secrets: r.secrets,
        state_url: state.and_then(|(_, _, _, full)| full),
        lines,
        files: std::iter::once(file.to_path_buf())
            .chain(r.sources.files.iter().map(|f| f.path.clone()))
            .collect(),
        key_origins,
    })
}

/// One `model_list` entry, read: `None` when poolctl cannot call it (named why).
fn deployment(
    r: &mut Reader,
    i: usize,
    item: &Value,
    providers: &mut Vec<Provider>,
    groups: &mut IndexMap<String, (Src, bool)>,
) -> Option<Deployment> {
    let base = vec![k("model_list"), Seg::I(i)];
    let at = |extra: &[Seg]| {
        let mut p = base.clone();
        p.extend_from_slice(extra);
        p
    };
    let item_src = r.src(&base);
    let Some(m) = item.as_mapping() else {
        r.error(
            &item_src,
            "expected a deployment: a map with `model_name` and `litellm_params`".into(),
        );
        return None;
    };
    for (key, _) in m {
        let key = key_str(key);
        const DEPLOYMENT: &[&str] = &["model_name", "litellm_params", "model_info"];
        if !DEPLOYMENT.contains(&key.as_str()) {
            let src = r.src(&at(&[k(&key)]));
            r.unknown(&src, &key, DEPLOYMENT);
        }
    }
    let name_src = r.src(&at(&[k("model_name")]));
    let Some(group) = m.get("model_name").and_then(value_text) else {
        r.error(&item_src, "a deployment needs `model_name`".into());
        return None;
    };
    if group.contains('*') {
        r.unused(
            &name_src,
            "a wildcard model group (poolctl routes only the models it is given by name)",
        );
        return None;
    }
    groups
        .entry(group.clone())
        .or_insert_with(|| (name_src.clone(), false));
    let Some(params) = m.get("litellm_params").and_then(Value::as_mapping) else {
        r.error(
            &item_src,
            "a deployment needs `litellm_params` with `model`".into(),
        );
        return None;
    };
    let model_src = r.src(&at(&[k("litellm_params"), k("model")]));
    let Some(model) = params.get("model").and_then(value_text) else {
        r.error(&item_src, "`litellm_params` needs `model`".into());
        return None;
    };
    let info = m.get("model_info").and_then(Value::as_mapping);
    let mode_src = r.src(&at(&[k("model_info"), k("mode")]));
    let path = match info
        .and_then(|i| i.get("mode"))
        .and_then(value_text)
        .as_deref()
    {
        None | Some("chat") => "chat",
        Some("embedding") => "embed",
        Some("rerank") => "rerank",
        Some(other) => {
            r.unused(
                &mode_src,
                &format!("mode `{other}` (poolctl serves chat, embeddings and rerank); deployment `{model}` is not used"),
            );
            return None;
        }
    };
    let Some((kn, model_name)) = split_model(&model) else {
        let prefix = model.split_once('/').map(|(p, _)| p).unwrap_or("(none)");
        r.unused(
            &model_src,
            &format!("`{model}`: poolctl has no wire for LiteLLM's provider `{prefix}`; deployment not used"),
        );
        return None;
    };
    let mut api_base: Option<(String, Src)> = None;
    let mut api_key: Option<(Value, Src)> = None;
    let mut api_version: Option<(String, Src)> = None;
    let mut timeout_ms = None;
    let mut first_token_ms = None;
    let mut rpm = None;
    let mut tpm = None;
    let mut weight = None;
    for (key, v) in params {
        let key = key_str(key);
        let src = r.src(&at(&[k("litellm_params"), k(&key)]));
        match key.as_str() {
            "model" => {}
            "api_base" | "base_url" => api_base = r.string(v, &src).map(|s| (s, src)),
            "api_key" => api_key = Some((v.clone(), src)),
            "api_version" => api_version = r.string(v, &src).map(|s| (s, src)),
            "timeout" => {
                timeout_ms = r
                    .number(v, &src)
                    .map(|n| ((n * 1000.0).round() as u64, src))
            }
            "stream_timeout" => {
                first_token_ms = r
                    .number(v, &src)
                    .map(|n| ((n * 1000.0).round() as u64, src))
            }
            "rpm" => rpm = r.number(v, &src).map(|n| (n.round() as u64, src)),
            "tpm" => tpm = r.number(v, &src).map(|n| (n.round() as u64, src)),
            "weight" => weight = r.number(v, &src).map(|n| (n, src)),
            _ => r.unknown(&src, &key, PARAMS),
        }
    }
    // The base URL, in poolctl's convention for the wire.
    let (base_url, base_src, base_note) = match (&api_base, kn.prefix) {
        (Some((b, src)), _) => (b.trim_end_matches('/').to_string(), src.clone(), ""),
        (None, "azure") => match r.lookup("AZURE_API_BASE") {
            Some(b) => (
                b.trim_end_matches('/').to_string(),
                model_src.clone(),
                " (from $AZURE_API_BASE, as LiteLLM reads it)",
            ),
            None => {
                r.error(
                    &model_src,
                    "an Azure deployment needs `api_base` (or $AZURE_API_BASE)".into(),
                );
                return None;
            }
        },
        (None, _) => match kn.base {
            Some(b) => (
                b.to_string(),
                model_src.clone(),
                " (LiteLLM's default base)",
            ),
            None => {
                r.error(
                    &model_src,
                    format!("LiteLLM's `{}/` needs `api_base`", kn.prefix),
                );
                return None;
            }
        },
    };
    // Azure: its v1 API (`{resource}/openai/v1`, the deployment as the body's `model`),
    // which takes the key as `Authorization: Bearer` as every OpenAI-compatible API
    // does; the deployments URL LiteLLM calls wants an `api-key` header instead, and a
    // dated `api_version` the v1 API does not need.
    let mut base_note = base_note.to_string();
    let base_url = match kn.prefix {
        "azure" => {
            if let Some((v, src)) = &api_version {
                let _ = write!(
                    base_note,
                    ", {} `{v}` (Azure's v1 API needs no version)",
                    src.field
                );
            }
            let root = base_url
                .split("/openai")
                .next()
                .unwrap_or(&base_url)
                .to_string();
            format!("{root}/openai/v1")
        }
        "gemini" => strip_suffixes(&base_url, &["/v1beta", "/v1"]),
        "anthropic" => strip_suffixes(&base_url, &["/v1/messages", "/v1"]),
        _ => base_url,
    };
    if let Some((_, src)) = &api_version {
        if kn.prefix != "azure" {
            r.unused(src, "only Azure deployments take an API version");
        }
    }
    let (key, key_src, key_note) = match api_key {
        Some((Value::String(s), src)) if s.starts_with(ENV_PREFIX) => {
            (Key::Env(s[ENV_PREFIX.len()..].to_string()), src, "")
        }
        Some((v, src)) if value_text(&v).is_some_and(|s| !s.trim().is_empty()) => {
            r.warn(
                &src,
                format!(
                    "a literal API key in the file (it is used, never printed); export it as {} and write `api_key: os.environ/{}` instead",
                    kn.key_env, kn.key_env
                ),
            );
            (Key::Literal(value_text(&v).unwrap_or_default()), src, "")
        }
        _ => (
            Key::Env(kn.key_env.to_string()),
            model_src.clone(),
            " (LiteLLM's default variable)",
        ),
    };
    let provider = Provider {
        name: String::new(),
        prefix: kn.prefix,
        wire: kn.wire,
        dialect: kn
            .dialect
            // `openai/` before a base of one's own is any OpenAI-compatible server: the
            // dialect is inferred from its host, as for any pool config.
            .filter(|_| !(kn.prefix == "openai" && api_base.is_some())),
        base_url,
        base_src,
        base_note,
        key,
        key_src,
        key_note,
        timeout_ms,
        first_token_ms,
    };
    let provider = match providers.iter().position(|p| p.same(&provider)) {
        Some(i) => i,
        None => {
            providers.push(provider);
            providers.len() - 1
        }
    };
    // What the model can serve and costs.
    let mut facts: Vec<(&'static str, String, Src)> = Vec::new();
    if let Some(info) = info {
        let window_key = if info.contains_key("max_input_tokens") {
            "max_input_tokens"
        } else {
            "max_tokens"
        };
        for (key, v) in info {
            let key = key_str(key);
            let src = r.src(&at(&[k("model_info"), k(&key)]));
            let (field, kind) = match key.as_str() {
                // `id` is read below: a fallback target.
                "mode" | "id" => continue,
                k if k == window_key => ("context_window", Fact::Count),
                "max_output_tokens" => ("max_output_tokens", Fact::Count),
                "supports_vision" => ("images", Fact::Flag),
                "supports_function_calling" => ("tools", Fact::Flag),
                "supports_response_schema" => ("json_schema", Fact::Flag),
                "input_cost_per_token" => ("input_usd_per_mtok", Fact::Price),
                "output_cost_per_token" => ("output_usd_per_mtok", Fact::Price),
                "cache_read_input_token_cost" => ("cached_input_usd_per_mtok", Fact::Price),
                _ => {
                    r.unknown(&src, &key, MODEL_INFO);
                    continue;
                }
            };
            let value = match kind {
                Fact::Flag => r.flag(v, &src).map(|b| b.to_string()),
                Fact::Price => r.number(v, &src).map(|n| trim_float(n * 1e6)),
                Fact::Count => r.number(v, &src).map(|n| (n.round() as u64).to_string()),
            };
            if let Some(value) = value {
                facts.push((field, value, src));
            }
        }
    }
    if let Some(g) = groups.get_mut(&group) {
        g.1 = true;
    }
    let id = info
        .and_then(|i| i.get("id"))
        .and_then(value_text)
        .map(|id| (id, r.src(&at(&[k("model_info"), k("id")]))));
    Some(Deployment {
        group,
        name_src,
        provider,
        model: model_name,
        path,
        rpm,
        tpm,
        weight,
        facts,
        id,
    })
}

/// `s` without the first of `suffixes` it ends in.
fn strip_suffixes(s: &str, suffixes: &[&str]) -> String {
    for suffix in suffixes {
        if let Some(rest) = s.strip_suffix(suffix) {
            return rest.to_string();
        }
    }
    s.to_string()
}

/// A number as the text writes it: no float noise (`2.5`, not `2.4999999999999996`).
fn trim_float(x: f64) -> String {
    let r = (x * 1e6).round() / 1e6;
    if r.fract() == 0.0 && r.abs() < 1e15 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// Names providers by their LiteLLM prefix, in file order: `groq`, then `groq-2`, ….
fn name_providers(providers: &mut [Provider]) {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for p in providers.iter_mut() {
        let n = counts.entry(p.prefix).or_insert(0);
        *n += 1;
        let base = p.prefix.replace('_', "-");
        p.name = if *n == 1 { base } else { format!("{base}-{n}") };
    }
}

/// The variable a literal key is held under: `LITELLM_KEY_<PROVIDER>`.
fn literal_var(provider: &str) -> String {
    let up: String = provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("LITELLM_KEY_{up}")
}

/// Whether `g` is a model group of the file; an unknown one is an error naming the
/// nearest.
fn known_group(r: &mut Reader, g: &str, src: &Src, groups: &IndexMap<String, (Src, bool)>) -> bool {
    if groups.contains_key(g) {
        return true;
    }
    let nearest = crate::core::suggest::nearest(g, groups.keys().map(String::as_str));
    r.error(
        src,
        format!(
            "unknown model group `{g}`{}",
            crate::config::pool::suggest(
                &nearest,
                "model groups",
                &groups.keys().cloned().collect::<Vec<_>>()
            )
        ),
    );
    false
}

/// LiteLLM's fallback groups of `group`, in the order it tries them: the group's own
/// entry, else the generic `"*"` one, else `default_fallbacks`; each fallback group
/// is run with its own fallbacks in turn (LiteLLM's `run_async_fallback` calls the
/// router again for it), so `a → b, b → c` tries b, then c, then a's next, down to
/// `depth` levels (LiteLLM's `max_fallbacks`). Each group once, `group` never.
fn fallback_order(
    group: &str,
    chains: &BTreeMap<String, Vec<(String, Src)>>,
    defaults: &[(String, Src)],
    depth: usize,
) -> Vec<(String, Src)> {
    let of = |g: &str| -> Vec<(String, Src)> {
        chains
            .get(g)
            .or_else(|| chains.get("*"))
            .cloned()
            .unwrap_or_else(|| defaults.to_vec())
    };
    fn walk(
        g: &str,
        left: usize,
        of: &dyn Fn(&str) -> Vec<(String, Src)>,
        seen: &mut Vec<String>,
        out: &mut Vec<(String, Src)>,
    ) {
        if left == 0 {
            return;
        }
        for (fb, src) in of(g) {
            if seen.contains(&fb) {
                continue;
            }
            seen.push(fb.clone());
            out.push((fb.clone(), src));
            walk(&fb, left - 1, of, seen, out);
        }
    }
    let mut seen = vec![group.to_string()];
    let mut out = Vec::new();
    walk(group, depth, &of, &mut seen, &mut out);
    out
}

/// A group's entry of a fallback map, else the generic `"*"` one, without the group
/// itself (which `"*"` may name: LiteLLM never falls back to the group that failed).
fn targets_of(
    map: &BTreeMap<String, Vec<(String, Src)>>,
    group: &str,
) -> Option<Vec<(String, Src)>> {
    map.get(group)
        .or_else(|| map.get("*"))
        .map(|list| list.iter().filter(|(g, _)| g != group).cloned().collect())
}

/// `fallbacks` (and its kin) in LiteLLM's list-of-maps form: `[{"a": ["b", "c"]}]`.
fn fallback_map(
    r: &mut Reader,
    s: &Setting,
    groups: &IndexMap<String, (Src, bool)>,
    ids: &IndexMap<String, usize>,
    into: &mut BTreeMap<String, Vec<(String, Src)>>,
) {
    let Value::Sequence(items) = s.value else {
        if !s.value.is_null() {
            r.error(
                &s.src,
                "expected LiteLLM's list of maps: `[{\"model-group\": [\"fallback\", ...]}]`"
                    .into(),
            );
        }
        return;
    };
    for (j, item) in items.iter().enumerate() {
        let Some(m) = item.as_mapping() else {
            r.error(
                &s.src,
                format!("item {j}: expected a map `{{\"model-group\": [\"fallback\", ...]}}`"),
            );
            continue;
        };
        for (from, to) in m {
            let from = key_str(from);
            let mut path = s.path.clone();
            path.extend([Seg::I(j), k(&from)]);
            let src = r.src(&path);
            let src = Src {
                line: src.line.or(s.src.line),
                ..src
            };
            // `"*"`: LiteLLM's generic fallbacks, for every group without its own entry.
            let generic = from == "*";
            if !generic && !known_group(r, &from, &src, groups) {
                continue;
            }
            if !generic && !groups[&from].1 {
                r.warn(&src, format!("fallbacks of `{from}` not used: the group has no deployment poolctl can call"));
                continue;
            }
            let targets: Vec<String> = match to {
                Value::Sequence(list) => list.iter().filter_map(value_text).collect(),
                other => value_text(other).into_iter().collect(),
            };
            for t in targets {
                if t == from {
                    continue;
                }
                // A deployment's `model_info.id`: that one deployment.
                if ids.contains_key(&t) {
                    into.entry(from.clone()).or_default().push((t, src.clone()));
                    continue;
                }
                if !known_group(r, &t, &src, groups) {
                    continue;
                }
                if groups[&t].1 {
                    into.entry(from.clone()).or_default().push((t, src.clone()));
                } else {
                    r.warn(&src, format!("fallback `{t}` of `{from}` not used: the group has no deployment poolctl can call"));
                }
            }
        }
    }
}

/// Writes one step of a tier: a route, or the group of a model group's deployments,
/// leaving out the routes the tier already has.
#[allow(clippy::too_many_arguments)]
fn step(
    w: &mut Writer,
    deployments: &[Deployment],
    providers: &[Provider],
    idx: &[usize],
    src: &Src,
    least_busy: bool,
    strategy: Option<&Setting>,
    seen: &mut Vec<String>,
) {
    let mut members: Vec<(String, &Deployment)> = Vec::new();
    for &i in idx {
        let d = &deployments[i];
        let route = d.route(providers);
        if !seen.contains(&route) && !members.iter().any(|(r, _)| *r == route) {
            members.push((route, d));
        }
    }
    seen.extend(members.iter().map(|(r, _)| r.clone()));
    match members.as_slice() {
        [] => {}
        [(route, d)] => {
            let line = if d.path == "chat" {
                format!("    - {}", q(route))
            } else {
                format!("    - {{ route: {}, path: {} }}", q(route), d.path)
            };
            w.line(&line, src, "");
        }
        many => {
            let list: Vec<String> = many.iter().map(|(r, _)| q(r)).collect();
            // The other deployments' lines, so each is cited.
            let others: Vec<String> = many[1..]
                .iter()
                .map(|(_, d)| match d.name_src.line {
                    Some(l) => format!("{} {}", w.at(&d.name_src, l), d.name_src.field),
                    None => d.name_src.field.clone(),
                })
                .collect();
            w.line(
                &format!("    - group: [{}]", list.join(", ")),
                src,
                &format!(", {}", others.join(", ")),
            );
            // LiteLLM's weighted pick (simple_shuffle.py): `weight`, else the rpm of every
            // deployment, else the tpm of every deployment.
            if let Some((_, wsrc)) = many.iter().find_map(|(_, d)| d.weight.as_ref()) {
                let ws: Vec<String> = many
                    .iter()
                    .map(|(_, d)| trim_float(d.weight.as_ref().map(|w| w.0).unwrap_or(1.0)))
                    .collect();
                w.line(&format!("      weights: [{}]", ws.join(", ")), wsrc, "");
            } else if many.iter().all(|(_, d)| d.rpm.is_some()) {
                let ws: Vec<String> = many
                    .iter()
                    .map(|(_, d)| d.rpm.as_ref().map(|r| r.0).unwrap_or(1).to_string())
                    .collect();
                let rsrc = many[0]
                    .1
                    .rpm
                    .as_ref()
                    .map(|r| r.1.clone())
                    .unwrap_or_default();
                w.line(
                    &format!("      weights: [{}]", ws.join(", ")),
                    &rsrc,
                    " (by rpm)",
                );
            } else if many.iter().all(|(_, d)| d.tpm.is_some()) {
                let ws: Vec<String> = many
                    .iter()
                    .map(|(_, d)| d.tpm.as_ref().map(|t| t.0).unwrap_or(1).to_string())
                    .collect();
                let tsrc = many[0]
                    .1
                    .tpm
                    .as_ref()
                    .map(|t| t.1.clone())
                    .unwrap_or_default();
                w.line(
                    &format!("      weights: [{}]", ws.join(", ")),
                    &tsrc,
                    " (by tpm)",
                );
            }
            if least_busy {
                if let Some(s) = strategy {
                    w.line("      strategy: least_busy", &s.src, "");
                }
            }
            if many[0].1.path != "chat" {
                w.line(&format!("      path: {}", many[0].1.path), src, "");
            }
        }
    }
}

/// `router_settings`' Redis as `state:`: the URL as shown (no password), where it came
/// from, a note, and the URL with its password (applied at load).
type State = (String, Src, String, Option<Secret>);

fn redis_state(r: &mut Reader, router: Option<&Mapping>, keys: &[&str]) -> Option<State> {
    let sec = router?;
    if keys.is_empty() {
        return None;
    }
    let src_of = |r: &Reader, key: &str| r.src(&[k("router_settings"), k(key)]);
    if let Some(v) = sec.get("redis_url") {
        let src = src_of(r, "redis_url");
        let url = r.string(v, &src)?;
        let (shown, had_password) = without_userinfo(&url);
        return Some(if had_password {
            (
                shown,
                src,
                " (its credentials are added at load, never written here)".into(),
                Some(Secret::new(url)),
            )
        } else {
            (shown, src, String::new(), None)
        });
    }
    let host_src = src_of(r, "redis_host");
    let Some(host) = sec.get("redis_host").and_then(|v| r.string(v, &host_src)) else {
        let any = src_of(r, keys[0]);
        r.error(&any, "Redis settings without `redis_host`".into());
        return None;
    };
    let port = match sec.get("redis_port") {
        Some(v) => {
            let src = src_of(r, "redis_port");
            r.string(v, &src)?
        }
        None => "6379".into(),
    };
    let db = match sec.get("redis_db") {
        Some(v) => {
            let src = src_of(r, "redis_db");
            r.string(v, &src)
                .map(|d| format!("/{d}"))
                .unwrap_or_default()
        }
        None => String::new(),
    };
    let shown = format!("redis://{host}:{port}{db}");
    let others: Vec<String> = keys
        .iter()
        .filter(|k| **k != "redis_host")
        .map(|k| format!("router_settings.{k}"))
        .collect();
    let also = if others.is_empty() {
        String::new()
    } else {
        format!(", {}", others.join(", "))
    };
    let password = match sec.get("redis_password") {
        Some(v) => {
            let src = src_of(r, "redis_password");
            if value_text(v).is_some_and(|s| !s.starts_with(ENV_PREFIX)) {
                r.warn(
                    &src,
                    "a literal Redis password in the file (it is used, never printed); export it and write `redis_password: os.environ/VAR` instead".into(),
                );
            }
            r.string(v, &src).filter(|p| !p.is_empty())
        }
        None => None,
    };
    Some(match password {
        Some(pw) => {
            let _ = Secret::new(pw.clone());
            let full = format!("redis://:{}@{host}:{port}{db}", percent_encode(&pw));
            (
                shown,
                host_src,
                format!("{also} (the password is added at load, never written here)"),
                Some(Secret::new(full)),
            )
        }
        None => (shown, host_src, also, None),
    })
}

/// `url` without `user:password@`, and whether it had a password.
fn without_userinfo(url: &str) -> (String, bool) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), false);
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => {
            let had = rest[..at].contains(':');
            (format!("{scheme}://{}", &rest[at + 1..]), had)
        }
        None => (url.to_string(), false),
    }
}

/// RFC 3986 percent-encoding of everything but the unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The text as it is written, with each line's LiteLLM source (file, line).
struct Writer {
    /// The names `# from` cites the files by: the main file's, then each include's.
    names: Vec<String>,
    lines: Vec<(String, Option<(usize, usize)>)>,
}

/// The column the `# from` comments start at.
const COMMENT_COLUMN: usize = 44;

impl Writer {
    fn plain(&mut self, s: &str) {
        self.lines.push((s.to_string(), None));
    }

    /// `FILE:LINE` of line `l` of the file `src` is in.
    fn at(&self, src: &Src, l: usize) -> String {
        format!("{}:{l}", self.names[src.file])
    }

    fn line(&mut self, s: &str, src: &Src, note: &str) {
        let at = match src.line {
            Some(l) => self.at(src, l),
            None => self.names[src.file].clone(),
        };
        let pad = COMMENT_COLUMN.saturating_sub(s.chars().count()).max(1);
        self.lines.push((
            format!("{s}{}# from {at} {}{note}", " ".repeat(pad), src.field),
            src.line.map(|l| (src.file, l)),
        ));
    }
}

/// `s` as a YAML scalar: bare when it is a plain name, else double-quoted (JSON).
fn q(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        && s.parse::<f64>().is_err()
        && !["true", "false", "null", "yes", "no", "on", "off", "y", "n"]
            .contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
    }
}

fn key_str(v: &Value) -> String {
    value_text(v).unwrap_or_else(|| format!("{v:?}"))
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A variable name that holds a secret (`OPENAI_API_KEY`, `REDIS_PASSWORD`).
fn is_secret_name(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| up.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// Guards a typo read as one of LiteLLM's unused fields without a word: with
    /// `api_bsae`, the deployment went to its provider's public host.
    #[test]
    fn a_near_miss_of_a_field_poolctl_reads_names_the_field_meant() {
        let text = "model_list:\n  - model_name: g\n    litellm_params: {model: groq/m, api_key: os.environ/K, api_bsae: http://127.0.0.1:9, rmp: 5, api_type: x}\nrouter_settings:\n  fallbakcs: [{g: [g]}]\nlitellm_settings:\n  callbacks: [x]\nlitellm_setings: {}\n";
        let env = |v: &str| (v == "K").then(|| "sk-test-0123456789".to_string());
        let i = translate(Path::new("c.yaml"), text, &env).unwrap();
        let said = |field: &str| {
            i.unused
                .iter()
                .find(|u| u.field == field)
                .map(|u| u.message.clone())
                .unwrap_or_else(|| panic!("{field} not named: {:?}", i.unused))
        };
        let field = "model_list[0].litellm_params.api_bsae";
        assert!(said(field).ends_with("did you mean `api_base`?"));
        assert!(said("model_list[0].litellm_params.rmp").ends_with("did you mean `rpm`?"));
        assert!(said("router_settings.fallbakcs").ends_with("did you mean `fallbacks`?"));
        assert!(said("litellm_setings").ends_with("did you mean `litellm_settings`?"));
        // LiteLLM's own fields are only unused, whatever they sit near.
        assert_eq!(
            said("model_list[0].litellm_params.api_type"),
            "not used by poolctl"
        );
        assert_eq!(said("litellm_settings.callbacks"), "not used by poolctl");
        assert!(i.errors.is_empty(), "{:?}", i.errors);
    }

    #[test]
    fn a_prefix_names_the_wire_and_no_prefix_is_read_by_the_model_name() {
        let (kn, m) = split_model("together_ai/meta-llama/Llama-3").unwrap();
        assert_eq!(
            (kn.prefix, kn.wire, m.as_str()),
            ("together_ai", Wire::OpenAi, "meta-llama/Llama-3")
        );
        assert_eq!(split_model("gpt-4o").unwrap().0.prefix, "openai");
        assert_eq!(
            split_model("claude-3-opus-20240229").unwrap().0.wire,
            Wire::Anthropic
        );
        assert!(split_model("bedrock/anthropic.claude-v2").is_none());
        assert!(
            split_model("gemini-pro").is_none(),
            "LiteLLM reads it as Vertex AI's"
        );
        assert!(split_model("openai/").is_none());
    }

    #[test]
    fn a_litellm_file_is_told_by_a_top_level_model_list_in_linear_time() {
        assert!(is_litellm("# c\nmodel_list:\n  - model_name: x\n"));
        assert!(!is_litellm("providers:\n  model_list: 1\n"));
        let deep = format!(
            "model_list: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(is_litellm(&deep));
        let err = translate(Path::new("d.yaml"), &deep, &no_env).unwrap_err();
        assert!(err.message.contains("nesting deeper"), "{err}");
    }

    /// Guards a deployment whose `api_base` and key came from a YAML anchor through a
    /// merge key (`<<: *local`): the key was left as a field "not used", and the
    /// deployment was sent to api.openai.com with OPENAI_API_KEY.
    #[test]
    fn a_merge_key_gives_a_deployment_what_its_anchor_holds() {
        let text = "x-local: &local\n  api_base: http://127.0.0.1:9101/v1\n  api_key: os.environ/LOCAL_KEY\nmodel_list:\n  - model_name: llama\n    litellm_params:\n      <<: *local\n      model: openai/llama-3\n";
        let env = |v: &str| (v == "LOCAL_KEY").then(|| "k".to_string());
        let import = translate(Path::new("a.yaml"), text, &env).unwrap();
        assert!(import.errors.is_empty(), "{:?}", import.errors);
        assert!(
            import
                .text
                .contains("base_url: \"http://127.0.0.1:9101/v1\""),
            "{}",
            import.text
        );
        assert!(
            import.text.contains("api_key_env: LOCAL_KEY"),
            "{}",
            import.text
        );
        assert!(!import.text.contains("api.openai.com"), "{}", import.text);
    }

    /// LiteLLM runs a fallback group with its own fallbacks (`a → b, b → c` reaches c),
    /// and `"*"` is the fallback of every group without an entry of its own.
    #[test]
    fn fallbacks_are_followed_through_each_group_and_star_is_every_others() {
        let group = |name: &str, model: &str| {
            format!("  - model_name: {name}\n    litellm_params:\n      model: groq/{model}\n      api_key: os.environ/K\n")
        };
        let text = format!(
            "model_list:\n{}{}{}{}router_settings:\n  fallbacks: [{{\"a\": [\"b\"]}}, {{\"b\": [\"c\"]}}, {{\"*\": [\"d\"]}}]\n",
            group("a", "ma"),
            group("b", "mb"),
            group("c", "mc"),
            group("d", "md")
        );
        let env = |v: &str| (v == "K").then(|| "k".to_string());
        let import = translate(Path::new("f.yaml"), &text, &env).unwrap();
        assert!(import.errors.is_empty(), "{:?}", import.errors);
        let tier = |name: &str| -> Vec<String> {
            let lines: Vec<&str> = import.text.lines().collect();
            let at = lines
                .iter()
                .position(|l| l.starts_with(&format!("  {name}:")))
                .unwrap();
            lines[at + 1..]
                .iter()
                .take_while(|l| l.starts_with("    - "))
                .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
                .collect()
        };
        // a: b, then b's own c, then c's fallback (the generic d).
        assert_eq!(tier("a"), ["groq/ma", "groq/mb", "groq/mc", "groq/md"]);
        assert_eq!(tier("c"), ["groq/mc", "groq/md"]);
        assert_eq!(tier("d"), ["groq/md"]);
    }

    /// LiteLLM's "fallback to a specific model id": a fallback naming a deployment's
    /// `model_info.id` reaches that one deployment (it used to be an unknown group, and
    /// `serve` refused to start).
    #[test]
    fn a_fallback_may_name_one_deployment_by_its_model_info_id() {
        let text = "model_list:\n  - model_name: a\n    litellm_params: {model: groq/ma, api_key: os.environ/K}\n  - model_name: b\n    litellm_params: {model: groq/mb1, api_key: os.environ/K}\n  - model_name: b\n    litellm_params: {model: groq/mb2, api_key: os.environ/K}\n    model_info: {id: b-two}\nrouter_settings:\n  fallbacks: [{a: [b-two]}]\n";
        let env = |v: &str| (v == "K").then(|| "k".to_string());
        let import = translate(Path::new("i.yaml"), text, &env).unwrap();
        assert!(import.errors.is_empty(), "{:?}", import.errors);
        assert!(
            import.unused.iter().all(|u| !u.field.ends_with(".id")),
            "{:?}",
            import.unused
        );
        let a: Vec<&str> = import
            .text
            .lines()
            .skip_while(|l| !l.starts_with("  a:"))
            .skip(1)
            .take_while(|l| l.starts_with("    - "))
            .map(|l| l.split_whitespace().nth(1).unwrap())
            .collect();
        assert_eq!(a, ["groq/ma", "groq/mb2"], "{}", import.text);
    }

    /// LiteLLM's weighted pick takes `weight`, else `rpm`, else `tpm`: a group whose
    /// deployments give only `tpm` is weighted by it, not split evenly.
    #[test]
    fn a_group_weighted_only_by_tpm_is_weighted_by_tpm() {
        let text = "model_list:\n  - model_name: g\n    litellm_params: {model: groq/m1, api_key: os.environ/K, tpm: 900000}\n  - model_name: g\n    litellm_params: {model: groq/m2, api_key: os.environ/K, tpm: 100000}\n";
        let env = |v: &str| (v == "K").then(|| "k".to_string());
        let import = translate(Path::new("w.yaml"), text, &env).unwrap();
        assert!(
            import.text.contains("weights: [900000, 100000]"),
            "{}",
            import.text
        );
    }

    /// `"*"` may name every group, the failing one too: a group's own deployments are
    /// never where its blocked prompt goes.
    #[test]
    fn a_star_entry_never_sends_a_group_to_itself() {
        let text = "model_list:\n  - model_name: a\n    litellm_params: {model: groq/ma, api_key: os.environ/K}\n  - model_name: b\n    litellm_params: {model: groq/mb, api_key: os.environ/K}\nlitellm_settings:\n  content_policy_fallbacks: [{\"*\": [a, b]}]\n";
        let env = |v: &str| (v == "K").then(|| "k".to_string());
        let import = translate(Path::new("s.yaml"), text, &env).unwrap();
        assert!(import.errors.is_empty(), "{:?}", import.errors);
        assert!(
            import.text.contains("content_policy_routes: [groq/mb]")
                && import.text.contains("content_policy_routes: [groq/ma]"),
            "{}",
            import.text
        );
    }

    #[test]
    fn scalars_are_quoted_only_when_yaml_would_read_them_otherwise() {
        assert_eq!(q("openai/gpt-4o"), "openai/gpt-4o");
        assert_eq!(q("x/llama:free"), "\"x/llama:free\"");
        assert_eq!(q("yes"), "\"yes\"");
        assert_eq!(q("3.5"), "\"3.5\"");
        assert_eq!(q("<your-endpoint>"), "\"<your-endpoint>\"");
    }

    #[test]
    fn a_redis_url_is_shown_without_its_credentials() {
        assert_eq!(
            without_userinfo("redis://:pw@h:6379/0"),
            ("redis://h:6379/0".into(), true)
        );
        assert_eq!(
            without_userinfo("redis://h:6379"),
            ("redis://h:6379".into(), false)
        );
        assert_eq!(percent_encode("a b@c/d"), "a%20b%40c%2Fd");
    }

    /// Guards the secret boundary: a literal key and a Redis password reach the loaded
    /// config and never the text.
    #[test]
    fn secrets_reach_the_config_never_the_text() {
        let text = "model_list:\n  - model_name: m\n    litellm_params:\n      model: groq/llama\n      api_key: sk-literal-0123456789abcdef\nrouter_settings:\n  redis_host: r.internal\n  redis_password: os.environ/RPW\ngeneral_settings:\n  master_key: sk-master-0123456789abcdef\n";
        let env = |v: &str| (v == "RPW").then(|| "s3cr3t-redis".to_string());
        let (config, import) = load(Path::new("c.yaml"), text, &env).unwrap();
        for secret in [
            "sk-literal-0123456789abcdef",
            "s3cr3t-redis",
            "sk-master-0123456789abcdef",
        ] {
            assert!(!import.text.contains(secret), "{}", import.text);
        }
        assert_eq!(
            config.key("LITELLM_KEY_GROQ", &no_env).as_deref(),
            Some("sk-literal-0123456789abcdef")
        );
        assert_eq!(
            config.key(MASTER_KEY_VAR, &no_env).as_deref(),
            Some("sk-master-0123456789abcdef")
        );
        // The environment wins over the file's literal.
        let set = |v: &str| (v == "LITELLM_KEY_GROQ").then(|| "from-env".to_string());
        assert_eq!(
            config.key("LITELLM_KEY_GROQ", &set).as_deref(),
            Some("from-env")
        );
        assert_eq!(config.serve_token_env.as_deref(), Some(MASTER_KEY_VAR));
        assert_eq!(
            config.state_location(),
            crate::config::pool::StateLocation::Redis(
                "redis://:s3cr3t-redis@r.internal:6379".into()
            )
        );
        // Each literal named by its line, never by its value.
        let lines: Vec<Option<usize>> = import.warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, [Some(10), Some(5)]);
        assert!(import.warnings.iter().all(|w| !w.message.contains("sk-")));
    }

    #[test]
    fn environment_variables_answer_os_environ_and_their_keys_are_held_like_literals() {
        let text = "environment_variables:\n  BASE: http://127.0.0.1:9/v1\n  MY_API_KEY: sk-env-block-0123456789\nmodel_list:\n  - model_name: m\n    litellm_params:\n      model: openai/x\n      api_base: os.environ/BASE\n      api_key: os.environ/MY_API_KEY\n";
        let (config, import) = load(Path::new("c.yaml"), text, &no_env).unwrap();
        assert_eq!(config.providers["openai"].base_url, "http://127.0.0.1:9/v1");
        assert_eq!(config.providers["openai"].api_key_env, "MY_API_KEY");
        assert_eq!(
            config.key("MY_API_KEY", &no_env).as_deref(),
            Some("sk-env-block-0123456789")
        );
        assert!(!import.text.contains("sk-env-block"), "{}", import.text);
        assert_eq!(import.warnings.len(), 1);
        assert_eq!(import.warnings[0].line, Some(3));
    }

    #[test]
    fn an_unset_environment_value_is_a_located_error() {
        let text = "model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/x\n      api_base: os.environ/BASE\n";
        let err = load(Path::new("c.yaml"), text, &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("c.yaml:5") && err.contains("`BASE` is not set"),
            "{err}"
        );
    }
}
