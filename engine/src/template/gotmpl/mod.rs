//! Go's `text/template` language, which Ollama's Modelfile TEMPLATE uses: a parser, an
//! executor with Go's semantics, and the tree walks Ollama does on templates (the variables a
//! template mentions, cutting after `.Response`, finding the text around `.ToolCalls` and
//! `.Thinking`).

mod exec;
mod parse;
mod printf;
pub mod value;

use std::collections::HashMap;

pub use exec::Func;
pub use parse::{Arg, Branch, Cmd, Node, Pipe, Tree};
pub use value::Value;

use crate::Result;

/// A parsed Go template.
#[derive(Debug, Clone)]
pub struct GoTemplate {
    tree: Tree,
}

impl GoTemplate {
    pub fn parse(source: &str) -> Result<GoTemplate> {
        Ok(GoTemplate {
            tree: parse::parse(source)?,
        })
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    pub fn root_mut(&mut self) -> &mut Vec<Node> {
        &mut self.tree.root
    }

    /// Runs the template with `data` as dot (and `$`).
    pub fn execute(&self, data: &Value, funcs: &HashMap<&'static str, Func>) -> Result<String> {
        exec::Exec::run(&self.tree, &self.tree.root, funcs, data)
    }

    /// Runs other top-level nodes (e.g. a cut copy of this template) with this template's
    /// `define`s.
    pub fn execute_nodes(
        &self,
        root: &[Node],
        data: &Value,
        funcs: &HashMap<&'static str, Func>,
    ) -> Result<String> {
        exec::Exec::run(&self.tree, root, funcs, data)
    }
}
