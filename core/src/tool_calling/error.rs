//! [`ToolError`]: why tools, a tool choice or a family name could not become a preset.
//!
//! Where XGrammar 0.2.8 raises a `ValueError` for the same input, the message starts with
//! XGrammar's message word for word (so logs read the same after switching), and may go on
//! with what grammask knows more precisely.

use super::Family;

/// Tools, a tool choice or a family that cannot be turned into a preset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The family name is none of [`Family::ALL`]'s names.
    #[error("Unknown format type: {name}, supported types: [{}]", supported_names())]
    UnknownFamily {
        /// The name given.
        name: String,
    },
    /// The `tools` value is not a JSON array.
    #[error("The 'tools' argument must be a list, got {found}.")]
    ToolsNotAList {
        /// The JSON type that was given instead.
        found: &'static str,
    },
    /// A tool is not an OpenAI function tool nor a builtin tool.
    #[error("tools[{index}]: {reason}")]
    MalformedTool {
        /// Position of the tool in the list.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A `tool_choice` value of none of the accepted shapes.
    #[error("tool_choice: {reason}")]
    MalformedToolChoice {
        /// What is wrong with it.
        reason: String,
    },
    /// An `allowed_tools` reference of type `function` without its `function` object.
    #[error(
        "Allowed function tool references must include 'function'. \
         tool_choice.allowed_tools.tools[{index}] has none."
    )]
    AllowedFunctionWithoutName {
        /// Position of the reference in `allowed_tools.tools`.
        index: usize,
    },
    /// A named tool choice names no function tool of the list.
    #[error("The tool with name '{name}' is not found in the tools list.")]
    ToolNotFound {
        /// The name in `tool_choice`.
        name: String,
    },
    /// A builtin tool choice (`{"type": T}`) matches no builtin tool, or several.
    #[error(
        "Builtin tool choice must match exactly one builtin tool, got {matches} matches. \
         The choice's type is '{kind}'."
    )]
    BuiltinChoiceMismatch {
        /// The builtin type in `tool_choice`.
        kind: String,
        /// How many builtin tools have that type.
        matches: usize,
    },
    /// `allowed_tools` names function tools that are not in the list (sorted).
    #[error("Allowed function tools are not found in the tools list: {}.", py_set(names))]
    AllowedFunctionsNotFound {
        /// The missing names, sorted.
        names: Vec<String>,
    },
    /// `allowed_tools` names builtin types that no tool of the list has (sorted).
    #[error("Allowed builtin tools are not found in the tools list: {}.", py_set(kinds))]
    AllowedBuiltinsNotFound {
        /// The missing types, sorted.
        kinds: Vec<String>,
    },
    /// `tool_choice` requires a call, but no tool is left to call.
    #[error("The 'tools' list is empty, which is not allowed when 'tool_choice' is 'required'.")]
    RequiredWithoutTools,
    /// A forced tool choice (a named function, a builtin type) does not resolve to exactly
    /// one tool the family can write.
    #[error("Forced tool choice must resolve to exactly one tool. {}", forced_detail(.count, .family))]
    ForcedNotOneTool {
        /// How many tools it resolved to.
        count: usize,
        /// Set when the one tool it resolved to is a builtin tool this family ignores.
        family: Option<Family>,
    },
    /// `tool_choice` requires a call, and the only tools left are builtin tools, which
    /// this family ignores (XGrammar fails an assertion here).
    #[error(
        "Required tool choice needs at least one function tool: family `{}` ignores builtin tools.",
        .family.name()
    )]
    RequiredWithoutFunctionTools {
        /// The family.
        family: Family,
    },
    /// The family refuses builtin tools outright (MiMo, MiniMax M3).
    #[error("{} does not support builtin tools.", family_title(*.family))]
    BuiltinToolsUnsupported {
        /// The family.
        family: Family,
    },
}

fn supported_names() -> String {
    Family::ALL.iter().map(|f| format!("'{}'", f.name())).collect::<Vec<_>>().join(", ")
}

/// Python's rendering of a set of strings (`{'a', 'b'}`), sorted so it is deterministic.
fn py_set(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("{{{}}}", quoted.join(", "))
}

fn forced_detail(count: &usize, family: &Option<Family>) -> String {
    match family {
        Some(f) => format!("It resolved to a builtin tool, which family `{}` ignores.", f.name()),
        None => format!("It resolved to {count}."),
    }
}

/// The product names XGrammar uses in its messages.
fn family_title(family: Family) -> &'static str {
    match family {
        Family::Mimo => "MiMo",
        Family::MinimaxM3 => "MiniMax M3",
        other => other.name(),
    }
}
