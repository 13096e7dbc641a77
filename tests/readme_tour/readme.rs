//! The README's "Two-minute tour" as data: its shell commands, in order,
//! with the sentences between them that tell the reader to do something
//! (type in a terminal, stop the gateway, close the clients).

/// One command line of a ```sh block, as the README writes it.
#[derive(Debug, Clone)]
pub struct Cmd {
    /// What a shell is given: the line with its comment (a shell ignores
    /// it) and its continuation lines, exactly as written.
    pub line: String,
    /// The command without its comment, continuations joined: what the
    /// test recognises a step by.
    pub command: String,
    /// The comment after `  # `, if any.
    pub comment: String,
    /// The lines after it that are comments of their own (`# tether
    /// listening on …`): what the command prints.
    pub output: Vec<String>,
}

/// A piece of the tour, in reading order.
#[derive(Debug, Clone)]
pub enum Item {
    /// A paragraph of prose, its lines joined by spaces.
    Prose(String),
    Cmd(Cmd),
}

/// The section of `readme` headed `## Two-minute tour`, up to the next
/// `## ` heading.
pub fn tour_section(readme: &str) -> &str {
    let start = readme
        .lines()
        .scan(0, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| line.trim_end() == "## Two-minute tour")
        .map(|(at, _)| at)
        .expect("README.md has a \"## Two-minute tour\" section");
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The tour's items: prose paragraphs and the commands of its ```sh blocks.
pub fn items(section: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut prose: Vec<&str> = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<Cmd> = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if !in_sh {
            if line.trim_start().starts_with("```") {
                flush_prose(&mut prose, &mut items);
                assert!(
                    line.trim() == "```sh",
                    "a code block in the tour that is not ```sh: {line:?}"
                );
                in_sh = true;
            } else if line.trim().is_empty() {
                flush_prose(&mut prose, &mut items);
            } else {
                prose.push(line.trim());
            }
            continue;
        }
        if line.trim() == "```" {
            in_sh = false;
            items.extend(pending.take().map(Item::Cmd));
            continue;
        }
        if let Some(out) = line.trim_start().strip_prefix("# ") {
            let cmd = pending
                .as_mut()
                .expect("an output line (`# …`) after a command");
            cmd.output.push(out.to_string());
            continue;
        }
        items.extend(pending.take().map(Item::Cmd));
        // A line ending in `\` continues on the next one.
        let mut whole = line.to_string();
        while whole.ends_with('\\') {
            let next = lines.next().expect("a continuation line");
            whole.push('\n');
            whole.push_str(next);
        }
        let (command, comment) = match whole.find("  # ") {
            Some(i) => (&whole[..i], whole[i + 4..].trim()),
            None => (whole.as_str(), ""),
        };
        let command = command
            .split("\\\n")
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        pending = Some(Cmd {
            line: whole.clone(),
            command: command.trim().to_string(),
            comment: comment.to_string(),
            output: Vec::new(),
        });
    }
    assert!(!in_sh, "a ```sh block in the tour is not closed");
    flush_prose(&mut prose, &mut items);
    items
}

fn flush_prose(prose: &mut Vec<&str>, items: &mut Vec<Item>) {
    if !prose.is_empty() {
        items.push(Item::Prose(prose.join(" ")));
        prose.clear();
    }
}

/// Every `Type `TEXT` in A` of a paragraph, in order.
pub fn typed_in_a(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("Type `") {
        let after = &rest[i + "Type `".len()..];
        let Some(end) = after.find('`') else { break };
        if after[end + 1..].starts_with(" in A") {
            out.push(after[..end].to_string());
        }
        rest = &after[end + 1..];
    }
    out
}

/// The URL of `Open <URL>`, if the paragraph has one.
pub fn opened(prose: &str) -> Option<String> {
    let i = prose.find("Open <")?;
    let after = &prose[i + "Open <".len()..];
    Some(after[..after.find('>')?].to_string())
}

#[test]
fn the_tour_is_read_as_the_reader_reads_it() {
    let text = "## Two-minute tour\n\nType `hi` in\nA, then:\n\n```sh\n\
                tether serve\n# tether listening on x\ncurl -s a \\\n  -d b   # note\n```\n\n## Next\n";
    let items = items(tour_section(text));
    let Item::Prose(p) = &items[1] else {
        panic!("{items:?}")
    };
    assert_eq!(typed_in_a(p), ["hi"]);
    let Item::Cmd(serve) = &items[2] else {
        panic!("{items:?}")
    };
    assert_eq!(serve.command, "tether serve");
    assert_eq!(serve.output, ["tether listening on x"]);
    let Item::Cmd(curl) = &items[3] else {
        panic!("{items:?}")
    };
    assert_eq!(curl.command, "curl -s a -d b");
    assert_eq!(curl.comment, "note");
    assert_eq!(curl.line, "curl -s a \\\n  -d b   # note");
    assert_eq!(items.len(), 4);
}
