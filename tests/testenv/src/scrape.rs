//! The Prometheus text format as the processes under test serve it on `/metrics`: parsed into
//! samples, summed by name and labels; the apiserver's own `/metrics` read through a client.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::Error;

/// One series' value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of `text` (comments and blank lines skipped, lines that do not parse too).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, rest) = match l.rfind('}') {
                Some(i) => (&l[..=i], &l[i + 1..]),
                None => l.split_once(' ')?,
            };
            let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, ls)) => (n, parse_labels(ls.strip_suffix('}').unwrap_or(ls))),
                None => (head.trim(), BTreeMap::new()),
            };
            Some(Sample {
                name: name.to_owned(),
                labels,
                value,
            })
        })
        .collect()
}

/// `a="x",b="y\"z"` as a map (escapes undone).
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(o) => value.push(o),
                    None => {}
                },
                '"' => break,
                o => value.push(o),
            }
        }
        out.insert(key.trim().to_owned(), value);
    }
}

/// The sum of the samples named `name` whose labels `keep` accepts.
pub fn sum(
    samples: &[Sample],
    name: &str,
    keep: impl Fn(&BTreeMap<String, String>) -> bool,
) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && keep(&s.labels))
        .map(|s| s.value)
        .sum()
}

/// The sum of every series named `name` in `text` (all label sets).
///
/// `name` may name labels too, as the text format writes them (`family{k="v"}`): then only
/// the samples with those label values count.
pub fn total(text: &str, name: &str) -> f64 {
    let (family, want) = match name.split_once('{') {
        Some((family, labels)) => (
            family,
            parse_labels(labels.strip_suffix('}').unwrap_or(labels)),
        ),
        None => (name, BTreeMap::new()),
    };
    sum(&parse(text), family, |labels| {
        want.iter().all(|(k, v)| labels.get(k) == Some(v))
    })
}

/// The cumulative buckets of histogram `name` (`name_bucket` series): (upper bound, count), in
/// the order served.
pub fn buckets(samples: &[Sample], name: &str) -> Vec<(f64, f64)> {
    let series = format!("{name}_bucket");
    samples
        .iter()
        .filter(|s| s.name == series)
        .filter_map(|s| {
            let le = match s.labels.get("le")?.as_str() {
                "+Inf" => f64::INFINITY,
                v => v.parse().ok()?,
            };
            Some((le, s.value))
        })
        .collect()
}

/// `GET /metrics` on a plain-HTTP loopback server, as text (an error unless it answers 200).
pub async fn get(addr: SocketAddr) -> Result<String, Error> {
    match crate::http::get(addr, "/metrics").await {
        Ok((200, body)) => Ok(body),
        Ok((status, _)) => Err(Error::Invalid(format!(
            "GET /metrics on {addr} answered {status}"
        ))),
        Err(e) => Err(Error::Invalid(e)),
    }
}

/// The apiserver's own `/metrics`, through `client` (its identity must be allowed to read them).
pub async fn apiserver(client: &kube::Client) -> Result<Vec<Sample>, Error> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| Error::Invalid(format!("apiserver /metrics request: {e}")))?;
    Ok(parse(&client.request_text(req).await?))
}

/// `apiserver_request_total` by (VERB, resource[/subresource]) for the requests `keep` accepts
/// (it is given the API group and the resource).
pub fn requests_by_verb(
    samples: &[Sample],
    keep: impl Fn(&str, &str) -> bool,
) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name == "apiserver_request_total")
    {
        let label = |k: &str| s.labels.get(k).map(String::as_str).unwrap_or_default();
        if !keep(label("group"), label("resource")) {
            continue;
        }
        let mut resource = label("resource").to_owned();
        if !label("subresource").is_empty() {
            resource = format!("{resource}/{}", label("subresource"));
        }
        *out.entry((label("verb").to_owned(), resource))
            .or_insert(0.0) += s.value;
    }
    out
}

/// What changed per key from `before` to `after` (keys that did not change left out).
pub fn delta(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP x_total X.
# TYPE x_total counter
x_total{result="ok",verb="create"} 3
x_total{result="error"} 1
x_total_other 7
h_seconds_bucket{le="0.1"} 2
h_seconds_bucket{le="+Inf"} 5
apiserver_request_total{group="cluster.open-cluster-management.io",resource="placements",subresource="status",verb="PATCH",code="200"} 4
apiserver_request_total{group="",resource="pods",subresource="",verb="POST",code="201"} 9
plain 1.5
"#;

    #[test]
    fn parses_and_sums() {
        let s = parse(TEXT);
        assert_eq!(total(TEXT, "x_total"), 4.0);
        assert_eq!(total(TEXT, "plain"), 1.5);
        // Labels in the name, as the text format writes them: only those series.
        assert_eq!(total(TEXT, r#"x_total{result="error"}"#), 1.0);
        assert_eq!(total(TEXT, r#"x_total{verb="create",result="ok"}"#), 3.0);
        assert_eq!(total(TEXT, r#"x_total{result="nope"}"#), 0.0);
        assert_eq!(
            sum(&s, "x_total", |l| l
                .get("result")
                .is_some_and(|r| r == "ok")),
            3.0
        );
        assert_eq!(
            buckets(&s, "h_seconds"),
            vec![(0.1, 2.0), (f64::INFINITY, 5.0)]
        );
        let ocm = requests_by_verb(&s, |g, _| g == "cluster.open-cluster-management.io");
        assert_eq!(
            ocm.into_iter().collect::<Vec<_>>(),
            vec![(("PATCH".into(), "placements/status".into()), 4.0)]
        );
        let quoted = parse("m{a=\"x\\\"y\",b=\"z\"} 1");
        assert_eq!(quoted[0].labels.get("a").map(String::as_str), Some("x\"y"));
        assert_eq!(quoted[0].labels.get("b").map(String::as_str), Some("z"));
    }
}
