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

    /// Checks, as Go does at parse time, that every function the template calls exists: the
    /// builtins or one of `extra`.
    pub fn check_functions(&self, extra: &[&str]) -> Result<()> {
        fn walk_pipe(p: &Pipe, ok: &dyn Fn(&str) -> bool) -> std::result::Result<(), String> {
            for a in p.cmds.iter().flat_map(|c| &c.args) {
                match a {
                    Arg::Ident(name) if !ok(name) => return Err(name.clone()),
                    Arg::Pipe(p, _) => walk_pipe(p, ok)?,
                    _ => {}
                }
            }
            Ok(())
        }
        fn walk(nodes: &[Node], ok: &dyn Fn(&str) -> bool) -> std::result::Result<(), String> {
            for n in nodes {
                match n {
                    Node::Action(p) => walk_pipe(p, ok)?,
                    Node::If(b) | Node::Range(b) | Node::With(b) => {
                        walk_pipe(&b.pipe, ok)?;
                        walk(&b.list, ok)?;
                        if let Some(e) = &b.else_list {
                            walk(e, ok)?;
                        }
                    }
                    Node::Template { pipe: Some(p), .. } => walk_pipe(p, ok)?,
                    _ => {}
                }
            }
            Ok(())
        }
        let ok = |name: &str| exec::BUILTINS.contains(&name) || extra.contains(&name);
        let mut r = walk(&self.tree.root, &ok);
        for body in self.tree.defines.values() {
            r = r.and_then(|_| walk(body, &ok));
        }
        r.map_err(|name| crate::Error::Template(format!("function {name:?} not defined")))
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
