//! The documentation against the code it describes, without `man` or a network:
//!
//! * `docs/libi-mpiexec.1` is what `libi-mpiexec --man` prints (the page made from the
//!   parser's option table), and names every option `libi-mpiexec --help` shows;
//! * every option in the README's table of common options is one the parser accepts
//!   (`libi-mpiexec -OPTION -h` describes it);
//! * the README stays a front page (at most 250 lines, the two commands as given);
//! * every relative link of the README, `docs/` and `bench/results.md` names a file that
//!   exists, and a `#section` in it a heading that the target has (as GitHub makes anchors).
//!
//! After changing an option: `cargo run -p libi-mpiexec -- --man > docs/libi-mpiexec.1`
//! (or run this test with `LIBI_BLESS=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

const MPIEXEC: &str = env!("CARGO_BIN_EXE_libi-mpiexec");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `libi-mpiexec ARGS`: its stdout, after checking it exited 0.
fn run(args: &[&str]) -> String {
    let out = Command::new(MPIEXEC).args(args).output().expect("run libi-mpiexec");
    assert!(
        out.status.success(),
        "libi-mpiexec {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn man_page_is_the_one_the_parser_makes() {
    let made = run(&["--man"]);
    let path = root().join("docs/libi-mpiexec.1");
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    if made != kept {
        if std::env::var_os("LIBI_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &made).expect("write docs/libi-mpiexec.1");
            return;
        }
        let first = made.lines().zip(kept.lines()).position(|(a, b)| a != b);
        panic!(
            "docs/libi-mpiexec.1 is not what `libi-mpiexec --man` prints (first difference at \
             line {}); regenerate it: cargo run -p libi-mpiexec -- --man > docs/libi-mpiexec.1",
            first.map_or(made.lines().count().min(kept.lines().count()), |i| i) + 1
        );
    }
}

/// The options `--help` lists: the long names (`--np`), and the short ones (`-n`).
fn help_options(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in help.lines().map(str::trim_start).filter(|l| l.starts_with('-')) {
        let spec = line.split("  ").next().unwrap_or(line);
        for word in spec.split([',', ' ']).filter(|w| w.starts_with('-')) {
            names.push(word.trim_start_matches('-').to_string());
        }
    }
    names
}

#[test]
fn man_page_names_every_option_of_help() {
    let page = read("docs/libi-mpiexec.1");
    let help = run(&["--help"]);
    let names = help_options(&help);
    assert!(names.len() > 50, "too few options found in --help: {names:?}");
    for name in names {
        // In roff: `\fB\-name\fR`, the name spelled as the parser's table has it (Hydra's
        // `-pmi_args` for clap's `--pmi-args`).
        let hyphens = format!("\\fB\\-{}\\fR", name.replace('-', "\\-"));
        let underscores = format!("\\fB\\-{}\\fR", name.replace('-', "_"));
        assert!(
            page.contains(&hyphens) || page.contains(&underscores),
            "--help shows -{name}, docs/libi-mpiexec.1 does not"
        );
    }
}

/// The README's section `### Common options`: the code spans of each row's first cell.
fn readme_option_cells(readme: &str) -> Vec<String> {
    let start = readme.find("\n### Common options\n").expect("README has ### Common options");
    let section = &readme[start + 1..];
    let end = section[1..].find("\n#").map_or(section.len(), |e| e + 1);
    let mut cells = Vec::new();
    for row in section[..end].lines().filter(|l| l.starts_with("| `")) {
        let first = row[1..].split(" | ").next().unwrap_or("");
        cells.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
    }
    cells
}

#[test]
fn readme_common_options_are_the_parsers() {
    let readme = read("README.md");
    let cells = readme_option_cells(&readme);
    assert!(cells.len() > 15, "too few options in the README's table: {cells:?}");
    let options = read("docs/options.md");
    for cell in cells {
        let word = cell.split([' ', '=']).next().unwrap_or("");
        if word == "-OPTION" {
            continue;
        }
        if let Some(name) = word.strip_prefix('-') {
            let text = run(&[word, "-h"]);
            assert!(
                text.starts_with(&format!("\n-{name}: ")),
                "README lists {word}; `libi-mpiexec {word} -h` says {text:?}"
            );
        } else {
            // A variable (`MPIEXEC_TIMEOUT=S`): a row of the full table.
            assert!(
                options.contains(&format!("| `{cell}`")),
                "README lists {cell}, options.md not"
            );
        }
    }
}

#[test]
fn readme_is_a_front_page() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; the reference belongs in docs/");
    for command in [
        "\ncargo build --release --workspace && target/release/libi-mpiexec -n 4 hostname\n",
        "\nci/test.sh\n",
    ] {
        assert!(readme.contains(command), "README lost {command:?}");
    }
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of a Markdown file outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect()
}

/// The targets of the Markdown links of one line, outside code spans.
fn links(line: &str) -> Vec<String> {
    let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    let mut files = vec![root().join("README.md"), root().join("bench/results.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs/").flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                files.push(p);
            }
        }
    }
    let mut bad = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a page");
        for line in prose(&text) {
            for link in links(line) {
                if link.contains("://") || link.starts_with("mailto:") {
                    continue;
                }
                let (path, section) = link.split_once('#').unwrap_or((&link, ""));
                let target = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().expect("a page's folder").join(path)
                };
                let shown = file.strip_prefix(root()).unwrap_or(file).display().to_string();
                if !target.exists() {
                    bad.push(format!("{shown}: {link}: no such file"));
                } else if !section.is_empty() && target.extension().is_some_and(|e| e == "md") {
                    let there = std::fs::read_to_string(&target).expect("read a target");
                    if !anchors(&there).iter().any(|a| a == section) {
                        bad.push(format!("{shown}: {link}: no such section"));
                    }
                }
            }
        }
    }
    assert!(files.len() > 15, "too few pages found: {files:?}");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor(" GPUs (`-gpus-per-proc`, `-gpu-subdevs-per-proc`)"),
        "gpus--gpus-per-proc--gpu-subdevs-per-proc"
    );
    assert_eq!(
        anchor("The node's topology for MPICH (`PMI_hwloc_xmlfile`)"),
        "the-nodes-topology-for-mpich-pmi_hwloc_xmlfile"
    );
    assert_eq!(links("see [a](b.md#c) and `[x](y)` and [d](e)"), ["b.md#c", "e"]);
}
