//! `GET /metrics`: the daemon's counters in Prometheus' text exposition format (version 0.0.4).
//!
//! One process-wide [`METRICS`] registry, fed by small hooks: the `count_requests` middleware
//! (requests by route and status; it also stamps each request's arrival, [`arrival`]), the
//! first token a generation sends (`record_first_token`: the observed time to first token), the
//! end of every generation (`record_generation`: tokens, rates), embeddings, the scheduler
//! (loads, unloads) and pulls (bytes). Gauges (queue depth, busy slots, loaded models) are read
//! from the scheduler at scrape time.
//!
//! Labels come from the server, never from a client: routes are the router's templates
//! (`/v1/models/{*model}`) and `model` is the canonical name of a model in the store (as
//! `/api/ps` shows it), so the label set is bounded by the store.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engine::generate::runner::Summary;

use crate::server::AppState;
use crate::util::lock;

/// A Prometheus histogram with fixed buckets.
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), plus one for `+Inf`.
    counts: Vec<AtomicU64>,
    /// The sum, in millionths.
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((v * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// The samples of one series; `labels` is empty or `key="value",` pairs each ending in a
    /// comma.
    fn write_series(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {cum}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |l: &str| match l.strip_suffix(',') {
            Some(l) => format!("{{{l}}}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{name}_sum{} {sum}\n{name}_count{} {cum}",
            braces(labels),
            braces(labels)
        );
    }
}

const SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const RATES: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

/// The metrics of one model.
pub struct ModelMetrics {
    pub generations: u64,
    /// Prompt tokens of finished generations (tokens in), cached ones included.
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    /// Tokens generated (tokens out).
    pub eval_tokens: u64,
    pub embedding_tokens: u64,
    prompt_micros: u64,
    eval_micros: u64,
    pub loads: u64,
    pub unloads: u64,
    /// Observed: from the request's arrival to its first generated token handed to the client.
    pub ttft: Histogram,
    pub prompt_rate: Histogram,
    pub eval_rate: Histogram,
}

impl Default for ModelMetrics {
    fn default() -> Self {
        ModelMetrics {
            generations: 0,
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
            eval_tokens: 0,
            embedding_tokens: 0,
            prompt_micros: 0,
            eval_micros: 0,
            loads: 0,
            unloads: 0,
            ttft: Histogram::new(SECONDS),
            prompt_rate: Histogram::new(RATES),
            eval_rate: Histogram::new(RATES),
        }
    }
}

/// Every metric the daemon keeps.
#[derive(Default)]
pub struct Metrics {
    /// (route, method, status) -> count.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// Model name -> its metrics.
    models: Mutex<BTreeMap<String, ModelMetrics>>,
    pub pull_bytes: AtomicU64,
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

tokio::task_local! {
    /// When the request being handled arrived (set by [`count_requests`]).
    static ARRIVAL: Instant;
}

/// When the request this task is handling arrived: its head was read, before its body (so a
/// slow upload, a wait for the body and every check count in the time to first token and in
/// `total_duration`). `Instant::now()` outside a request.
pub fn arrival() -> Instant {
    ARRIVAL.try_with(|t| *t).unwrap_or_else(|_| Instant::now())
}

impl Metrics {
    pub fn count_request(&self, route: &str, method: &str, status: u16) {
        *lock(&self.requests)
            .entry((route.to_string(), method.to_string(), status))
            .or_insert(0) += 1;
    }

    /// Runs `f` on `model`'s metrics (created on first use).
    pub fn with_model<R>(&self, model: &str, f: impl FnOnce(&mut ModelMetrics) -> R) -> R {
        let mut models = lock(&self.models);
        if !models.contains_key(model) {
            models.insert(model.to_string(), ModelMetrics::default());
        }
        f(models.get_mut(model).expect("inserted above"))
    }

    /// A generation of `model` handed its first generated token to the client
    /// `since_arrival` after its request arrived.
    pub fn record_first_token(&self, model: &str, since_arrival: Duration) {
        self.with_model(model, |m| m.ttft.observe(since_arrival.as_secs_f64()));
    }

    /// A finished generation of `model`.
    pub fn record_generation(&self, model: &str, s: &Summary) {
        let evaluated = s.prompt_tokens.saturating_sub(s.cached_tokens) as u64;
        let generated = s.generated.len() as u64;
        self.with_model(model, |m| {
            m.generations += 1;
            m.prompt_tokens += s.prompt_tokens as u64;
            m.cached_prompt_tokens += s.cached_tokens as u64;
            m.eval_tokens += generated;
            m.prompt_micros += micros(s.prompt_duration);
            m.eval_micros += micros(s.eval_duration);
            if evaluated > 0 && !s.prompt_duration.is_zero() {
                m.prompt_rate
                    .observe(evaluated as f64 / s.prompt_duration.as_secs_f64());
            }
            // The first token comes with the prompt; the rate is over the rest.
            if generated > 1 && !s.eval_duration.is_zero() {
                m.eval_rate
                    .observe((generated - 1) as f64 / s.eval_duration.as_secs_f64());
            }
        });
    }

    pub fn record_embedding(&self, model: &str, tokens: u64) {
        self.with_model(model, |m| m.embedding_tokens += tokens);
    }

    pub fn model_loaded(&self, model: &str) {
        self.with_model(model, |m| m.loads += 1);
    }

    pub fn model_unloaded(&self, model: &str) {
        self.with_model(model, |m| m.unloads += 1);
    }

    /// Counts the bytes a pull's progress reports, once each: the callback remembers how far
    /// each blob had got.
    pub fn counting_pull(
        &'static self,
        inner: Arc<dyn Fn(registry::Progress) + Send + Sync>,
    ) -> Arc<dyn Fn(registry::Progress) + Send + Sync> {
        let seen: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
        Arc::new(move |p: registry::Progress| {
            if let registry::Progress::Pulling {
                digest, completed, ..
            } = &p
            {
                let mut seen = lock(&seen);
                let last = seen.entry(digest.to_string()).or_insert(0);
                if *completed > *last {
                    self.pull_bytes.fetch_add(completed - *last, Ordering::Relaxed);
                    *last = *completed;
                }
            }
            inner(p)
        })
    }

    /// The exposition text, with the scheduler's gauges.
    pub fn render(&self, st: &AppState) -> String {
        let mut out = String::new();
        self.write_counters(&mut out);
        head(
            &mut out,
            "ollamars_queue_depth",
            "gauge",
            "Requests waiting for a model or a slot, by the model they want.",
        );
        for (model, n) in st.sched.queued_by_model() {
            let _ = writeln!(out, "ollamars_queue_depth{{model=\"{}\"}} {n}", escape(&model));
        }
        let slots = st.sched.slot_usage();
        head(
            &mut out,
            "ollamars_slots_busy",
            "gauge",
            "Slots serving a request, by loaded model.",
        );
        for (model, busy, _) in &slots {
            let _ = writeln!(out, "ollamars_slots_busy{{model=\"{}\"}} {busy}", escape(model));
        }
        head(
            &mut out,
            "ollamars_slots_total",
            "gauge",
            "Slots of each loaded model.",
        );
        for (model, _, total) in &slots {
            let _ = writeln!(out, "ollamars_slots_total{{model=\"{}\"}} {total}", escape(model));
        }
        head(&mut out, "ollamars_models_loaded", "gauge", "Models loaded now.");
        let _ = writeln!(out, "ollamars_models_loaded {}", slots.len());
        out
    }

    /// Everything but the scheduler's gauges.
    fn write_counters(&self, out: &mut String) {
        head(
            out,
            "ollamars_requests_total",
            "counter",
            "HTTP requests answered, by route, method and status.",
        );
        for ((route, method, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "ollamars_requests_total{{endpoint=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                escape(route),
                escape(method)
            );
        }
        {
            let models = lock(&self.models);
            let per_model = |out: &mut String,
                             name: &str,
                             kind: &str,
                             help: &str,
                             v: &dyn Fn(&ModelMetrics) -> String| {
                head(out, name, kind, help);
                for (model, m) in models.iter() {
                    let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), v(m));
                }
            };
            let counters: [CounterFamily; 7] = [
                ("ollamars_generations_total", "Generations finished.", |m| {
                    m.generations
                }),
                (
                    "ollamars_prompt_tokens_total",
                    "Prompt tokens of finished generations (tokens in), cached ones included.",
                    |m| m.prompt_tokens,
                ),
                (
                    "ollamars_prompt_cached_tokens_total",
                    "Prompt tokens reused from a slot's cache instead of evaluated.",
                    |m| m.cached_prompt_tokens,
                ),
                (
                    "ollamars_eval_tokens_total",
                    "Tokens generated (tokens out).",
                    |m| m.eval_tokens,
                ),
                ("ollamars_embedding_tokens_total", "Tokens embedded.", |m| {
                    m.embedding_tokens
                }),
                ("ollamars_model_loads_total", "Times the model was loaded.", |m| {
                    m.loads
                }),
                (
                    "ollamars_model_unloads_total",
                    "Times the model was unloaded.",
                    |m| m.unloads,
                ),
            ];
            for (name, help, f) in counters {
                per_model(out, name, "counter", help, &|m| f(m).to_string());
            }
            per_model(
                out,
                "ollamars_prompt_eval_seconds_total",
                "counter",
                "Time spent evaluating prompts.",
                &|m| (m.prompt_micros as f64 / 1e6).to_string(),
            );
            per_model(
                out,
                "ollamars_eval_seconds_total",
                "counter",
                "Time spent generating tokens after the first.",
                &|m| (m.eval_micros as f64 / 1e6).to_string(),
            );
            let histograms: [HistogramFamily; 3] = [
                (
                    "ollamars_time_to_first_token_seconds",
                    "Observed from a request's arrival to its first generated token sent (queue, load, prompt).",
                    |m| &m.ttft,
                ),
                (
                    "ollamars_prompt_tokens_per_second",
                    "Prompt evaluation speed per generation (evaluated tokens / prompt time).",
                    |m| &m.prompt_rate,
                ),
                (
                    "ollamars_eval_tokens_per_second",
                    "Generation speed per generation (tokens after the first / eval time).",
                    |m| &m.eval_rate,
                ),
            ];
            for (name, help, f) in histograms {
                head(out, name, "histogram", help);
                for (model, m) in models.iter() {
                    f(m).write_series(out, name, &format!("model=\"{}\",", escape(model)));
                }
            }
        }
        head(
            out,
            "ollamars_pull_bytes_total",
            "counter",
            "Blob bytes pulled from registries.",
        );
        let _ = writeln!(
            out,
            "ollamars_pull_bytes_total {}",
            self.pull_bytes.load(Ordering::Relaxed)
        );
    }
}

/// A per-model family: name, help and how to read it from a model's metrics.
type CounterFamily = (&'static str, &'static str, fn(&ModelMetrics) -> u64);
type HistogramFamily = (&'static str, &'static str, fn(&ModelMetrics) -> &Histogram);

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Escapes a label value (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `GET /metrics`.
pub async fn handler(State(st): State<Arc<AppState>>) -> Response {
    let mut resp = METRICS.render(&st).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// Middleware: counts every answered request by its route template and status.
pub async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |m| m.as_str())
        .to_string();
    let method = req.method().as_str().to_string();
    let resp = ARRIVAL.scope(Instant::now(), next.run(req)).await;
    METRICS.count_request(&route, &method, resp.status().as_u16());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::tests::{app, call};
    use axum::http::{Method, StatusCode};

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0, f64::NAN] {
            h.observe(v);
        }
        let mut out = String::new();
        h.write_series(&mut out, "x", "");
        assert!(out.contains("x_bucket{le=\"0.1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 4.25\nx_count 4\n"), "{out}");
        let mut out = String::new();
        h.write_series(&mut out, "x", "model=\"m\",");
        assert!(out.contains("x_bucket{model=\"m\",le=\"1\"} 3\n"), "{out}");
        assert!(
            out.contains("x_sum{model=\"m\"} 4.25\nx_count{model=\"m\"} 4\n"),
            "{out}"
        );
    }

    fn summary(prompt: usize, cached: usize, generated: usize) -> Summary {
        Summary {
            prompt_tokens: prompt,
            cached_tokens: cached,
            generated: vec![1; generated],
            end_token: false,
            prompt_duration: Duration::from_millis(100),
            eval_duration: Duration::from_millis(200),
            reason: engine::stop::DoneReason::Stop,
            stop_sequence: None,
            context_shifts: 0,
            thinking_tokens: 0,
            slot: 0,
        }
    }

    #[test]
    fn model_metrics_are_kept_and_rendered_per_model() {
        let m = Metrics::default();
        m.record_generation("a:latest", &summary(10, 4, 5));
        m.record_generation("a:latest", &summary(3, 0, 1));
        m.record_generation("b:latest", &summary(7, 0, 2));
        m.record_first_token("a:latest", Duration::from_millis(40));
        m.record_first_token("b:latest", Duration::from_secs(3));
        m.record_embedding("e\"vil", 9);
        m.model_loaded("a:latest");
        m.model_loaded("a:latest");
        m.model_unloaded("a:latest");
        let mut out = String::new();
        m.write_counters(&mut out);
        for needle in [
            "ollamars_generations_total{model=\"a:latest\"} 2\n",
            "ollamars_generations_total{model=\"b:latest\"} 1\n",
            "ollamars_prompt_tokens_total{model=\"a:latest\"} 13\n",
            "ollamars_prompt_cached_tokens_total{model=\"a:latest\"} 4\n",
            "ollamars_eval_tokens_total{model=\"a:latest\"} 6\n",
            "ollamars_eval_tokens_total{model=\"b:latest\"} 2\n",
            "ollamars_embedding_tokens_total{model=\"e\\\"vil\"} 9\n",
            "ollamars_model_loads_total{model=\"a:latest\"} 2\n",
            "ollamars_model_unloads_total{model=\"a:latest\"} 1\n",
            "ollamars_prompt_eval_seconds_total{model=\"a:latest\"} 0.2\n",
            "ollamars_time_to_first_token_seconds_bucket{model=\"a:latest\",le=\"0.05\"} 1\n",
            "ollamars_time_to_first_token_seconds_bucket{model=\"b:latest\",le=\"2.5\"} 0\n",
            "ollamars_time_to_first_token_seconds_bucket{model=\"b:latest\",le=\"5\"} 1\n",
            "ollamars_time_to_first_token_seconds_count{model=\"b:latest\"} 1\n",
            // 6 then 3 prompt tokens evaluated in 0.1 s (60/s, 30/s); 4 tokens after the
            // first in 0.2 s (20/s; the one-token generation has no eval rate).
            "ollamars_prompt_tokens_per_second_bucket{model=\"a:latest\",le=\"50\"} 1\n",
            "ollamars_prompt_tokens_per_second_bucket{model=\"a:latest\",le=\"100\"} 2\n",
            "ollamars_eval_tokens_per_second_bucket{model=\"a:latest\",le=\"20\"} 1\n",
            "ollamars_eval_tokens_per_second_count{model=\"a:latest\"} 1\n",
        ] {
            assert!(out.contains(needle), "{needle} missing:\n{out}");
        }
        // One HELP/TYPE per family, however many models.
        assert_eq!(
            out.matches("# TYPE ollamars_eval_tokens_total counter").count(),
            1
        );
    }

    #[tokio::test]
    async fn arrival_is_the_request_start_inside_a_request_and_now_outside() {
        let t = Instant::now();
        let inside = ARRIVAL
            .scope(t, async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                arrival()
            })
            .await;
        assert_eq!(inside, t);
        assert!(arrival() >= t + Duration::from_millis(20));
    }

    #[test]
    fn pull_bytes_count_each_byte_once() {
        static M: LazyLock<Metrics> = LazyLock::new(Metrics::default);
        let seen = Arc::new(AtomicU64::new(0));
        let s2 = seen.clone();
        let cb = M.counting_pull(Arc::new(move |_| {
            s2.fetch_add(1, Ordering::Relaxed);
        }));
        let d = |c: char| registry::Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap();
        for (digest, completed) in [
            (d('a'), 10),
            (d('a'), 30),
            (d('b'), 5),
            (d('a'), 30),
            (d('a'), 20),
        ] {
            cb(registry::Progress::Pulling {
                digest,
                total: 100,
                completed,
            });
        }
        cb(registry::Progress::VerifyingDigest);
        assert_eq!(M.pull_bytes.load(Ordering::Relaxed), 35);
        assert_eq!(
            seen.load(Ordering::Relaxed),
            6,
            "every step still reaches the client"
        );
    }

    #[tokio::test]
    async fn metrics_endpoint_is_read_only_and_counts_requests() {
        let keys = "admin:metrics-admin-0123456789,read:metrics-read-0123456789";
        let (app, _d) = app(&[("OLLAMARS_API_KEYS", keys)]);
        let (s, _, _) = call(&app, "127.0.0.1:1", Method::GET, "/metrics", &[], "").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        let auth = [("authorization", "Bearer metrics-read-0123456789")];
        let (s, _, _) = call(&app, "127.0.0.1:1", Method::GET, "/api/tags", &auth, "").await;
        assert_eq!(s, StatusCode::OK);
        let req = axum::http::Request::builder()
            .uri("/metrics")
            .header(header::HOST, "localhost")
            .header("authorization", "Bearer metrics-read-0123456789")
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        for needle in [
            "ollamars_requests_total{endpoint=\"/api/tags\",method=\"GET\",status=\"200\"}",
            "ollamars_requests_total{endpoint=\"/metrics\",method=\"GET\",status=\"401\"}",
            "# TYPE ollamars_time_to_first_token_seconds histogram",
            "# TYPE ollamars_eval_tokens_per_second histogram",
            "# TYPE ollamars_prompt_tokens_total counter",
            "# TYPE ollamars_eval_tokens_total counter",
            "# TYPE ollamars_queue_depth gauge",
            "# TYPE ollamars_slots_busy gauge",
            "ollamars_models_loaded 0",
            "# TYPE ollamars_model_loads_total counter",
            "# TYPE ollamars_model_unloads_total counter",
            "ollamars_pull_bytes_total ",
        ] {
            assert!(text.contains(needle), "{needle} missing:\n{text}");
        }
        // Every sample line is `name{labels} value` with a numeric value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }
}
