//! Which list: the four paginated lists of MCP, and the three capabilities that hold them and
//! announce their changes.

use super::method as m;

/// One of the four paginated lists a server offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum List {
    Resources,
    Templates,
    Tools,
    Prompts,
}

impl List {
    pub const ALL: [List; 4] = [List::Resources, List::Templates, List::Tools, List::Prompts];

    /// The request method that pages through it.
    pub fn method(self) -> &'static str {
        match self {
            List::Resources => m::RESOURCES_LIST,
            List::Templates => m::RESOURCES_TEMPLATES_LIST,
            List::Tools => m::TOOLS_LIST,
            List::Prompts => m::PROMPTS_LIST,
        }
    }

    /// The list a request method pages through.
    pub fn of(method: &str) -> Option<List> {
        List::ALL.into_iter().find(|l| l.method() == method)
    }

    /// The result's array field.
    pub fn items(self) -> &'static str {
        match self {
            List::Resources => "resources",
            List::Templates => "resourceTemplates",
            List::Tools => "tools",
            List::Prompts => "prompts",
        }
    }

    /// The capability a server declares to offer it.
    pub fn capability(self) -> Capability {
        match self {
            List::Resources | List::Templates => Capability::Resources,
            List::Tools => Capability::Tools,
            List::Prompts => Capability::Prompts,
        }
    }

    /// The notification that announces a change of it.
    pub fn changed(self) -> &'static str {
        self.capability().changed()
    }

    /// Its index among a server's four lists.
    pub fn slot(self) -> usize {
        self as usize
    }
}

/// A server capability that holds lists and announces their changes (`listChanged`).
///
/// A type of its own, not a [`List`], because change notifications name a capability:
/// `notifications/resources/list_changed` covers both `resources/list` and
/// `resources/templates/list`, so listen filters, topics and notices have three values, not
/// four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    Resources,
    Tools,
    Prompts,
}

impl Capability {
    pub const ALL: [Capability; 3] = [Capability::Resources, Capability::Tools, Capability::Prompts];

    /// The capability object's name in `capabilities`.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Resources => "resources",
            Capability::Tools => "tools",
            Capability::Prompts => "prompts",
        }
    }

    /// The notification that announces a change of its lists.
    pub fn changed(self) -> &'static str {
        match self {
            Capability::Resources => m::RESOURCES_LIST_CHANGED,
            Capability::Tools => m::TOOLS_LIST_CHANGED,
            Capability::Prompts => m::PROMPTS_LIST_CHANGED,
        }
    }

    /// The capability a `*/list_changed` notification names.
    pub fn of_changed(method: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.changed() == method)
    }

    /// The listen filter field that asks for its changes.
    pub fn filter_key(self) -> &'static str {
        match self {
            Capability::Resources => "resourcesListChanged",
            Capability::Tools => "toolsListChanged",
            Capability::Prompts => "promptsListChanged",
        }
    }

    /// The lists it holds, which a change notification of it invalidates.
    pub fn lists(self) -> &'static [List] {
        match self {
            Capability::Resources => &[List::Resources, List::Templates],
            Capability::Tools => &[List::Tools],
            Capability::Prompts => &[List::Prompts],
        }
    }

    /// Its index among the three.
    pub fn slot(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_capabilities_agree() {
        for list in List::ALL {
            assert_eq!(List::of(list.method()), Some(list));
            assert!(list.capability().lists().contains(&list));
            assert_eq!(Capability::of_changed(list.changed()), Some(list.capability()));
            assert_eq!(List::ALL[list.slot()], list);
        }
        for cap in Capability::ALL {
            assert_eq!(Capability::ALL[cap.slot()], cap);
        }
        assert_eq!(List::of(m::RESOURCES_READ), None);
    }
}
