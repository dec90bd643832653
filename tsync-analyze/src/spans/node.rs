//! Which node a span ran on: a resource attribute of its resource.
//!
//! OpenTelemetry puts what describes the process that made a span on the span's *resource*
//! (one per `resourceSpans` element), never on the span. The node is whatever shares one
//! CLOCK_REALTIME: the host (`host.name`), or where only Kubernetes attributes are set, the
//! node the pod ran on (`k8s.node.name`); failing both, the process (`service.instance.id`):
//! several processes of one host then become several nodes, which costs nothing but a pair
//! whose clocks agree. `--node-attribute KEY` asks for one attribute only.

use super::json::KeyValue;

/// The attributes that name a node unless told otherwise, in order of preference.
pub const DEFAULT_NODE_ATTRIBUTES: [&str; 3] =
    ["host.name", "k8s.node.name", "service.instance.id"];

/// The resource attributes tried, in order, for a resource's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAttribution {
    keys: Vec<String>,
}

impl Default for NodeAttribution {
    fn default() -> Self {
        NodeAttribution {
            keys: DEFAULT_NODE_ATTRIBUTES
                .iter()
                .map(|k| k.to_string())
                .collect(),
        }
    }
}

impl NodeAttribution {
    /// One attribute only (`--node-attribute KEY`).
    pub fn only(key: &str) -> Self {
        NodeAttribution {
            keys: vec![key.to_string()],
        }
    }

    /// The attributes tried, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The keys as a sentence: `` `host.name`, else `k8s.node.name`, else … ``.
    pub fn describe(&self) -> String {
        self.keys
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", else ")
    }

    /// The node a resource's attributes name, with the key that named it: the first key of
    /// the list that the resource has as a non-empty string.
    pub(crate) fn node_of<'a>(&'a self, attributes: &[KeyValue]) -> Option<(String, &'a str)> {
        self.keys.iter().find_map(|key| {
            attributes
                .iter()
                .find(|kv| kv.key == *key)
                .and_then(|kv| kv.value.as_ref()?.string_value.clone())
                .filter(|name| !name.is_empty())
                .map(|name| (name, key.as_str()))
        })
    }
}

/// A node found in a span file: a trace of the analysis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanNode {
    /// The node's name (the attribute's value): the trace's name.
    pub name: String,
    /// The resource attribute that named it (the first resource's, where several did).
    pub attribute: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(json: &str) -> Vec<KeyValue> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_first_attribute_present_names_the_node() {
        let a = NodeAttribution::default();
        let r = attrs(
            r#"[{"key":"service.instance.id","value":{"stringValue":"p-1"}},
                {"key":"k8s.node.name","value":{"stringValue":"worker-2"}}]"#,
        );
        assert_eq!(
            a.node_of(&r),
            Some(("worker-2".to_string(), "k8s.node.name"))
        );
        let r = attrs(
            r#"[{"key":"host.name","value":{"stringValue":""}},
                          {"key":"service.instance.id","value":{"stringValue":"p-1"}}]"#,
        );
        assert_eq!(
            a.node_of(&r),
            Some(("p-1".to_string(), "service.instance.id"))
        );
        assert_eq!(
            a.node_of(&attrs(r#"[{"key":"host.name","value":{"intValue":"3"}}]"#)),
            None
        );
        let only = NodeAttribution::only("service.name");
        assert_eq!(only.node_of(&r), None);
        assert_eq!(only.describe(), "`service.name`");
        assert_eq!(
            a.describe(),
            "`host.name`, else `k8s.node.name`, else `service.instance.id`"
        );
    }
}
