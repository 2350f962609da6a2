//! `poolctl walk TIER`: one real request down a chain, every step printed as it happens
//! (seed 002's verification: forcibly retire the primary and watch the chain reach its
//! end). `--retire` forces routes out for this walk only; the store never sees it.

use super::args::ConfigArg;
use super::context::{env_key, load_config, open_routing_store, Admission};
use super::exit::Exit;
use super::look::Look;
use super::{out, render};
use crate::core::clock::SystemClock;
use crate::core::conversation::{Part, Source, Turn};
use crate::core::request::{ChatRequest, EmbedRequest, Request, RerankRequest};
use crate::core::trace::{Report, Step};
use crate::core::vocab::{CallPath, Outcome, Route};
use crate::policy::card::Policy;
use crate::policy::health::Health;
use crate::router::{CallOptions, Router};
use crate::store::OverlayStore;
use clap::Args;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct WalkArgs {
    /// The tier to walk.
    pub tier: String,
    #[command(flatten)]
    pub config: ConfigArg,
    /// Retire ROUTE for this walk only (repeatable), to prove the chain survives without it.
    #[arg(long = "retire", value_name = "ROUTE")]
    pub retire: Vec<String>,
    /// Run under the policy card of workflow NAME (`policies:` in the config; default:
    /// the decision table's defaults). The workflow is recorded on every attempt.
    /// `--policy NAME` is the same flag.
    #[arg(long, visible_alias = "policy", value_name = "NAME")]
    pub workflow: Option<String>,
    /// The prompt to send (chat and stream tiers).
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "Reply with the single word OK."
    )]
    pub prompt: String,
    /// Attach an image or a PDF to the prompt (repeatable): an https URL the provider
    /// fetches, or a file (PNG, JPEG, GIF, WebP, PDF; at most 20 MB) sent inline. A
    /// route that cannot carry it is skipped, as `cannot_carry`.
    #[arg(long = "image", value_name = "URL|FILE")]
    pub images: Vec<String>,
    /// The API the request enters on: `chat` (chat completions), or `responses`
    /// (OpenAI's Responses API, read as `serve` reads one: a route of the Responses
    /// wire is sent the body as written).
    #[arg(long, value_enum, value_name = "API", default_value = "chat")]
    pub ingress: WalkIngress,
    /// Print JSON (spec/cli.md) instead of steps.
    #[arg(long)]
    pub json: bool,
}

/// `walk --ingress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WalkIngress {
    Chat,
    Responses,
}

/// The most bytes `--image` reads from a file: what providers take inline.
const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// `--image`: a URL as it is, or a file's bytes inline, its type from its extension.
fn attachment(arg: &str) -> anyhow::Result<Part> {
    if arg.starts_with("http://") {
        // As a scenario's request has it: a provider fetches an image by URL over
        // https only (OpenAI, Anthropic), so a plain-http one would fail there instead.
        anyhow::bail!("--image {arg}: an image URL must be https");
    }
    if arg.starts_with("https://") {
        return Ok(Part::Image {
            source: Source::Url { url: arg.into() },
            detail: None,
        });
    }
    let ext = std::path::Path::new(arg)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let media_type = match ext.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        _ => anyhow::bail!(
            "--image {arg}: not an https URL, nor a .png, .jpg, .gif, .webp or .pdf file"
        ),
    };
    let size = std::fs::metadata(arg)
        .map_err(|e| anyhow::anyhow!("--image {arg}: {e}"))?
        .len();
    if size > MAX_ATTACHMENT_BYTES {
        anyhow::bail!("--image {arg}: {size} bytes, over the 20 MB providers take inline");
    }
    let bytes = std::fs::read(arg).map_err(|e| anyhow::anyhow!("--image {arg}: {e}"))?;
    let source = Source::Base64 {
        media_type: media_type.into(),
        data: crate::serve::egress::base64_encode(&bytes),
    };
    Ok(if media_type == "application/pdf" {
        Part::Document {
            source,
            filename: std::path::Path::new(arg)
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string),
        }
    } else {
        Part::Image {
            source,
            detail: None,
        }
    })
}

pub async fn run(args: WalkArgs, look: &Look) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let tier = config.tier(&args.tier, &env_key)?;
    // Read before anything is printed: a bad `--image` is a usage error, not a step.
    let attachments = args
        .images
        .iter()
        .map(|a| attachment(a))
        .collect::<anyhow::Result<Vec<Part>>>()?;
    let path = tier.path;
    let policy = match &args.workflow {
        Some(name) => config.policies.get(name).cloned().ok_or_else(|| {
            let known: Vec<String> = config.policies.keys().cloned().collect();
            let hint = if known.is_empty() {
                "; it has no `policies:`".to_string()
            } else {
                crate::config::pool::suggest(
                    &crate::core::suggest::nearest(name, known.iter().map(String::as_str)),
                    "workflows",
                    &known,
                )
            };
            anyhow::anyhow!(
                "no policy card for workflow `{name}` in {}{hint}",
                config.file.display()
            )
        })?,
        None => Policy::default(),
    };
    let mut forced = BTreeMap::new();
    for r in &args.retire {
        let route: Route = config.find_route(r)?;
        if !tier.routes.iter().any(|spec| spec.route == route) {
            out::warn(&format!(
                "warning: --retire {route}: the route is not in tier `{}`, so retiring it changes nothing",
                args.tier
            ));
        }
        forced.insert(
            route,
            Health::Retired {
                reason: render::FORCED_BY_WALK.into(),
            },
        );
    }
    let (base, shared) = open_routing_store(&config)?;
    let store = Arc::new(OverlayStore::new(base, forced));
    // A walk goes through admission like any request: this process's buckets, or with
    // `state: redis://` the fleet's.
    let admission = Admission::open(&config)?;
    let router = admission.apply(Router::new(
        crate::wire::http_client(),
        Arc::new(SystemClock),
        store,
    ));
    let degrade = match &policy.degrade_tier {
        Some(name) => Some(config.tier(name, &env_key)?),
        None => None,
    };

    if !args.json {
        out::line(&format!(
            "walk tier `{}`: {} routes, path {path}",
            args.tier,
            tier.routes.len()
        ))?;
    }
    let route_width = render::walk_route_width(tier.routes.iter().map(|r| &r.route));
    let print_step = |step: Step<'_>| {
        out::line_live(&render::walk_step(step, route_width, look));
    };
    let mut opts = CallOptions::new(&policy);
    opts.workflow = args.workflow.as_deref();
    opts.degrade_tier = degrade.as_ref();
    if !args.json {
        opts.observer = Some(&print_step);
    }
    let chat = || {
        let mut req = ChatRequest::user(args.prompt.clone(), 64);
        if let Some(Turn::User { parts }) = req.conversation.turns.first_mut() {
            parts.extend(attachments.iter().cloned());
        }
        req
    };
    if args.ingress == WalkIngress::Responses && !matches!(path, CallPath::Chat | CallPath::Stream)
    {
        anyhow::bail!(
            "--ingress responses: tier `{}` serves the {path} path; the Responses API has chat and stream only",
            args.tier
        );
    }
    // The Responses API: the prompt and attachments as one user message's items, read
    // by the code that reads a gateway client's body.
    let chat_request = match args.ingress {
        WalkIngress::Chat => chat(),
        WalkIngress::Responses => {
            let (_, input) = crate::wire::responses::items::to_items(&chat().conversation);
            let body = serde_json::json!({
                "model": args.tier, "input": input, "max_output_tokens": 64,
                "stream": path == CallPath::Stream, "store": false,
            });
            let body = bytes::Bytes::from(serde_json::to_vec(&body)?);
            let none = crate::store::conversations::Conversations::memory(Default::default());
            crate::router::conversation::begin(&none, body, 0)
                .await
                .map_err(|e| anyhow::anyhow!("--ingress responses: {e}"))?
                .request
        }
    };
    let req = match path {
        CallPath::Chat => Request::Chat(chat_request),
        CallPath::Stream => Request::Stream(chat_request),
        CallPath::Embed => Request::Embed(EmbedRequest {
            inputs: vec![args.prompt.clone()],
            dimensions: None,
            original: None,
            ..Default::default()
        }),
        CallPath::Rerank => Request::Rerank(RerankRequest {
            query: args.prompt.clone(),
            documents: vec!["first candidate".into(), "second candidate".into()],
            top_n: 2,
            ..Default::default()
        }),
    };
    let report: Report = router.call(&tier, &req, opts).await.report;
    // With a SQLite state, what the walk spent reaches the file's usage counters.
    if let Some(usage) = super::capacity::UsageRecorder::for_admission(&config, &admission)? {
        usage.flush_or_warn().await;
    }
    let degraded = shared.map_or(0, |s| s.degraded()) + admission.degraded();
    if degraded > 0 {
        // The episode was logged once as it began; this is the count.
        out::warn(&format!(
            "poolctl: state store degraded: {degraded} decisions made without it (health on this process's own view, admission by on_store_error)"
        ));
    }
    if args.json {
        out::line_checked(&render::walk_json(&args.tier, &report).to_string())?;
    } else {
        out::line_checked(&render::walk_outcome(&report, look))?;
    }
    Ok(if report.outcome == Outcome::Success {
        Exit::Ok
    } else {
        Exit::Failed
    })
}
