//! `GET /metrics`: the daemon's counters in Prometheus' text exposition format (version 0.0.4).
//!
//! One process-wide [`METRICS`] registry, fed by small hooks: the `count_requests` middleware
//! (requests by route and status), the end of every generation (`record_generation`: tokens,
//! rates, time to first token), embeddings, the scheduler (loads, unloads) and pulls (bytes).
//! Gauges (queue depth, busy slots, loaded models) are read from the scheduler at scrape time.
//! Route labels are the router's templates (`/v1/models/{*model}`), so a client cannot grow the
//! label set.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engine::generate::runner::Summary;

use crate::server::AppState;

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

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cum}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cum}");
    }
}

const SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const RATES: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

/// Every metric the daemon keeps.
pub struct Metrics {
    /// (route, method, status) -> count.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub cached_prompt_tokens: AtomicU64,
    pub eval_tokens: AtomicU64,
    pub embedding_tokens: AtomicU64,
    prompt_micros: AtomicU64,
    eval_micros: AtomicU64,
    pub generations: AtomicU64,
    pub ttft: Histogram,
    pub prompt_rate: Histogram,
    pub eval_rate: Histogram,
    pub model_loads: AtomicU64,
    pub model_unloads: AtomicU64,
    pub pull_bytes: AtomicU64,
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Mutex::new(BTreeMap::new()),
    prompt_tokens: AtomicU64::new(0),
    cached_prompt_tokens: AtomicU64::new(0),
    eval_tokens: AtomicU64::new(0),
    embedding_tokens: AtomicU64::new(0),
    prompt_micros: AtomicU64::new(0),
    eval_micros: AtomicU64::new(0),
    generations: AtomicU64::new(0),
    ttft: Histogram::new(SECONDS),
    prompt_rate: Histogram::new(RATES),
    eval_rate: Histogram::new(RATES),
    model_loads: AtomicU64::new(0),
    model_unloads: AtomicU64::new(0),
    pull_bytes: AtomicU64::new(0),
});

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl Metrics {
    pub fn count_request(&self, route: &str, method: &str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((route.to_string(), method.to_string(), status))
            .or_insert(0) += 1;
    }

    /// A finished generation, `since_arrival` after its request arrived. The eval time runs
    /// from the first token to the end, so the first token came `since_arrival - eval` in.
    pub fn record_generation(&self, s: &Summary, since_arrival: Duration) {
        let evaluated = s.prompt_tokens.saturating_sub(s.cached_tokens) as u64;
        let generated = s.generated.len() as u64;
        self.generations.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(s.prompt_tokens as u64, Ordering::Relaxed);
        self.cached_prompt_tokens
            .fetch_add(s.cached_tokens as u64, Ordering::Relaxed);
        self.eval_tokens.fetch_add(generated, Ordering::Relaxed);
        self.prompt_micros
            .fetch_add(micros(s.prompt_duration), Ordering::Relaxed);
        self.eval_micros
            .fetch_add(micros(s.eval_duration), Ordering::Relaxed);
        self.ttft
            .observe(since_arrival.saturating_sub(s.eval_duration).as_secs_f64());
        if evaluated > 0 && !s.prompt_duration.is_zero() {
            self.prompt_rate
                .observe(evaluated as f64 / s.prompt_duration.as_secs_f64());
        }
        // The first token comes with the prompt; the rate is over the rest.
        if generated > 1 && !s.eval_duration.is_zero() {
            self.eval_rate
                .observe((generated - 1) as f64 / s.eval_duration.as_secs_f64());
        }
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
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
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
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let _ = writeln!(
            out,
            "# HELP ollamars_requests_total HTTP requests answered, by route, method and status.\n# TYPE ollamars_requests_total counter"
        );
        for ((route, method, status), n) in self.requests.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(
                out,
                "ollamars_requests_total{{endpoint=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                escape(route),
                escape(method)
            );
        }
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut out,
            "ollamars_generations_total",
            "Generations finished.",
            ld(&self.generations),
        );
        counter(
            &mut out,
            "ollamars_prompt_tokens_total",
            "Prompt tokens of finished generations (tokens in), cached ones included.",
            ld(&self.prompt_tokens),
        );
        counter(
            &mut out,
            "ollamars_prompt_cached_tokens_total",
            "Prompt tokens reused from a slot's cache instead of evaluated.",
            ld(&self.cached_prompt_tokens),
        );
        counter(
            &mut out,
            "ollamars_eval_tokens_total",
            "Tokens generated (tokens out).",
            ld(&self.eval_tokens),
        );
        counter(
            &mut out,
            "ollamars_embedding_tokens_total",
            "Tokens embedded.",
            ld(&self.embedding_tokens),
        );
        let _ = writeln!(
            out,
            "# HELP ollamars_prompt_eval_seconds_total Time spent evaluating prompts.\n# TYPE ollamars_prompt_eval_seconds_total counter\nollamars_prompt_eval_seconds_total {}",
            ld(&self.prompt_micros) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP ollamars_eval_seconds_total Time spent generating tokens after the first.\n# TYPE ollamars_eval_seconds_total counter\nollamars_eval_seconds_total {}",
            ld(&self.eval_micros) as f64 / 1e6
        );
        self.ttft.write(
            &mut out,
            "ollamars_time_to_first_token_seconds",
            "From a request's arrival to its first token (queue, load, prompt).",
        );
        self.prompt_rate.write(
            &mut out,
            "ollamars_prompt_tokens_per_second",
            "Prompt evaluation speed per generation (evaluated tokens / prompt time).",
        );
        self.eval_rate.write(
            &mut out,
            "ollamars_eval_tokens_per_second",
            "Generation speed per generation (tokens after the first / eval time).",
        );
        counter(
            &mut out,
            "ollamars_model_loads_total",
            "Models loaded.",
            ld(&self.model_loads),
        );
        counter(
            &mut out,
            "ollamars_model_unloads_total",
            "Models unloaded.",
            ld(&self.model_unloads),
        );
        counter(
            &mut out,
            "ollamars_pull_bytes_total",
            "Blob bytes pulled from registries.",
            ld(&self.pull_bytes),
        );
        gauge(
            &mut out,
            "ollamars_queue_depth",
            "Requests waiting for a model or a slot.",
            st.sched.queued() as f64,
        );
        gauge(
            &mut out,
            "ollamars_slots_busy",
            "Slots serving a request, over all loaded models.",
            st.sched.busy_slots() as f64,
        );
        gauge(
            &mut out,
            "ollamars_slots_total",
            "Slots of all loaded models.",
            st.sched.total_slots() as f64,
        );
        gauge(
            &mut out,
            "ollamars_models_loaded",
            "Models loaded now.",
            st.sched.status().len() as f64,
        );
        out
    }
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
    let resp = next.run(req).await;
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
        h.write(&mut out, "x", "help");
        assert!(out.contains("# TYPE x histogram"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 4.25\nx_count 4\n"), "{out}");
    }

    #[test]
    fn pull_bytes_count_each_byte_once() {
        static M: LazyLock<Metrics> = LazyLock::new(|| Metrics {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            cached_prompt_tokens: AtomicU64::new(0),
            eval_tokens: AtomicU64::new(0),
            embedding_tokens: AtomicU64::new(0),
            prompt_micros: AtomicU64::new(0),
            eval_micros: AtomicU64::new(0),
            generations: AtomicU64::new(0),
            ttft: Histogram::new(SECONDS),
            prompt_rate: Histogram::new(RATES),
            eval_rate: Histogram::new(RATES),
            model_loads: AtomicU64::new(0),
            model_unloads: AtomicU64::new(0),
            pull_bytes: AtomicU64::new(0),
        });
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
            "ollamars_eval_tokens_per_second_bucket{le=\"+Inf\"}",
            "ollamars_prompt_tokens_total ",
            "ollamars_eval_tokens_total ",
            "ollamars_queue_depth 0",
            "ollamars_slots_busy 0",
            "ollamars_models_loaded 0",
            "ollamars_model_loads_total ",
            "ollamars_model_unloads_total ",
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
