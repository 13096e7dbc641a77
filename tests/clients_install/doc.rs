//! docs/CLIENTS.md's "in ten lines" sections as data: the install
//! commands, the hello example, the command that runs it and the output it
//! shows, and the other commands the prose names in backticks.

/// One fenced block: its language tag and its lines.
#[derive(Debug, Clone)]
pub struct Block {
    pub lang: String,
    pub lines: Vec<String>,
}

/// A `## ` section: its prose (outside the blocks, lines joined by
/// spaces) and its blocks, in order.
#[derive(Debug)]
pub struct Section {
    pub prose: String,
    pub blocks: Vec<Block>,
}

/// The section of `md` headed exactly `heading`, up to the next `## `.
pub fn section(md: &str, heading: &str) -> Section {
    let mut lines = md.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "docs/CLIENTS.md has a {heading:?} section"
    );
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in lines {
        if open.is_none() && line.starts_with("## ") {
            break;
        }
        match (&mut open, line.trim_start().strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(Block {
                    lang: lang.trim().to_string(),
                    lines: Vec::new(),
                })
            }
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some(b), _) => b.lines.push(line.to_string()),
            (None, None) => prose.push(line.trim()),
        }
    }
    assert!(open.is_none(), "a block of {heading:?} is not closed");
    Section {
        prose: prose.join(" "),
        blocks,
    }
}

/// What a reader of a section does: install, save the example, run it.
#[derive(Debug)]
pub struct Hello {
    /// The first ```sh block, as a script.
    pub install: String,
    /// The first block in the example's language.
    pub source: String,
    /// The file the run command names (`hello.mjs`).
    pub file: String,
    /// The ```sh block after the example: its command...
    pub run: String,
    /// ...and the output it shows (its `# ` lines).
    pub output: Vec<String>,
}

pub fn hello(section: &Section, lang: &str) -> Hello {
    let sh: Vec<&Block> = section.blocks.iter().filter(|b| b.lang == "sh").collect();
    let install = sh.first().expect("an install block (```sh)");
    assert!(
        install.lines.iter().all(|l| !l.starts_with("# ")),
        "the install block shows no output: {install:?}"
    );
    let at = section
        .blocks
        .iter()
        .position(|b| b.lang == lang)
        .unwrap_or_else(|| panic!("an example in ```{lang}"));
    let run = section.blocks[at..]
        .iter()
        .find(|b| b.lang == "sh")
        .expect("a ```sh block after the example that runs it");
    let (command, output) = run.lines.split_first().expect("a command");
    let file = command
        .split_whitespace()
        .last()
        .filter(|w| w.starts_with("hello."))
        .unwrap_or_else(|| panic!("the run command names the example's file: {command:?}"))
        .to_string();
    Hello {
        install: install.lines.join("\n"),
        source: section.blocks[at].lines.join("\n") + "\n",
        file,
        run: command.clone(),
        output: output
            .iter()
            .map(|l| {
                l.strip_prefix("# ")
                    .unwrap_or_else(|| panic!("only output after the run command: {l:?}"))
                    .to_string()
            })
            .collect(),
    }
}

/// Every inline code span of `prose` that starts with `prefix`.
pub fn backticked(prose: &str, prefix: &str) -> Vec<String> {
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_section_is_read_as_its_reader_reads_it() {
    let md = "# T\n\n## A\n\nRun `npm install x`,\nthen `npm install y`.\n\n```sh\nmkdir a && cd a\n\
              npm i   # note\n```\n\n```js\nconsole.log(1);\n\n// done\n```\n\n```sh\nnode hello.mjs\n\
              # 1\n```\n\n## B\n\n```sh\nnot this\n```\n";
    let s = section(md, "## A");
    assert_eq!(s.blocks.len(), 3);
    assert_eq!(
        backticked(&s.prose, "npm install"),
        ["npm install x", "npm install y"]
    );
    let h = hello(&s, "js");
    assert_eq!(h.install, "mkdir a && cd a\nnpm i   # note");
    assert_eq!(h.source, "console.log(1);\n\n// done\n");
    assert_eq!(
        (h.run.as_str(), h.file.as_str()),
        ("node hello.mjs", "hello.mjs")
    );
    assert_eq!(h.output, ["1"]);
}
