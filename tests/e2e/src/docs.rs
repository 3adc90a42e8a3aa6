//! The project's Markdown read the way GitHub renders it, for the docs tests
//! (`tests/docs.rs`): fenced code blocks, inline code spans (also those that cross a line
//! break), links, headings and the anchors GitHub makes of them, table columns and HTML
//! comments; shell command lines split into commands and words; and a clap binary's `--help`.
//!
//! A small scanner, not a full CommonMark parser: ATX headings only (`## Title`; setext
//! underlines are not headings here), no indented code blocks (four spaces are list content),
//! and a table cell is what lies between unescaped `|` (as GitHub splits them, also inside code
//! spans). What it gets wrong makes a docs test fail loudly, never pass silently.

use std::collections::{BTreeSet, HashMap};

/// One Markdown file.
#[derive(Debug, Default)]
pub struct Markdown {
    /// Repository-relative path, `/`-separated.
    pub path: String,
    /// The file's lines (1-based line `n` is `lines[n - 1]`).
    pub lines: Vec<String>,
    pub blocks: Vec<CodeBlock>,
    pub spans: Vec<CodeSpan>,
    pub links: Vec<Link>,
    pub headings: Vec<Heading>,
    /// Every anchor a link can name: the headings' (deduplicated as GitHub does) and explicit
    /// `<a id="…">` / `<a name="…">`.
    pub anchors: BTreeSet<String>,
    /// The text outside code blocks, with code spans blanked out, by line number; HTML comments
    /// included.
    pub prose: Vec<(usize, String)>,
    /// The lines of HTML comments (not rendered).
    pub comment_lines: BTreeSet<usize>,
}

/// A fenced code block (```` ``` ```` or `~~~`).
#[derive(Debug, Clone)]
pub struct CodeBlock {
    /// The line of the opening fence.
    pub line: usize,
    /// The line of the closing fence (the last line of the file when unclosed).
    pub end: usize,
    /// The info string's first word, lowercased (`sh`, `text`, ``).
    pub lang: String,
    /// The content lines with their line numbers, the fence's indentation removed.
    pub lines: Vec<(usize, String)>,
    /// The nearest non-blank line before the fence, trimmed.
    pub before: Option<(usize, String)>,
    /// The nearest non-blank line after the closing fence, trimmed.
    pub after: Option<(usize, String)>,
}

/// An inline code span.
#[derive(Debug, Clone)]
pub struct CodeSpan {
    /// The line it starts on.
    pub line: usize,
    /// Its content as rendered: line breaks become spaces, one surrounding space is stripped.
    pub text: String,
    /// In a table row: the header of its column.
    pub column: Option<String>,
}

/// A link destination: `[text](target)`, `![alt](target)`, `[label]: target`, `href="target"`.
#[derive(Debug, Clone)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

#[derive(Debug, Clone)]
pub struct Heading {
    pub line: usize,
    pub level: usize,
    /// The rendered text (code spans unwrapped, links reduced to their text, HTML dropped).
    pub text: String,
    /// Its GitHub anchor, duplicates numbered.
    pub anchor: String,
}

/// A run of lines parsed together for code spans and links.
struct Unit {
    first_line: usize,
    text: String,
    kind: UnitKind,
}

#[derive(PartialEq)]
enum UnitKind {
    Paragraph,
    Heading(usize),
    /// A table row, with its table's header cells.
    Row(Vec<String>),
    /// An HTML comment: no code spans, no links.
    Comment,
}

impl Markdown {
    pub fn parse(path: &str, text: &str) -> Markdown {
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let mut md = Markdown {
            path: path.to_owned(),
            lines: lines.clone(),
            ..Markdown::default()
        };
        let mut units: Vec<Unit> = Vec::new();
        let mut para: Option<Unit> = None;
        let mut table_header: Option<Vec<String>> = None;
        let mut previous_row = false;
        let mut i = 0;
        let flush = |para: &mut Option<Unit>, units: &mut Vec<Unit>| {
            if let Some(u) = para.take() {
                units.push(u);
            }
        };
        while i < lines.len() {
            let line = &lines[i];
            let n = i + 1;
            let trimmed = line.trim_start();
            let is_row = trimmed.starts_with('|');
            if !is_row {
                table_header = None;
            }
            if let Some(fence) = opening_fence(line) {
                flush(&mut para, &mut units);
                previous_row = false;
                let before = (0..i)
                    .rev()
                    .find(|&j| !lines[j].trim().is_empty())
                    .map(|j| (j + 1, lines[j].trim().to_owned()));
                let mut content = Vec::new();
                let mut j = i + 1;
                let mut end = lines.len();
                while j < lines.len() {
                    if is_closing_fence(&lines[j], fence.ch, fence.len) {
                        end = j + 1;
                        break;
                    }
                    content.push((j + 1, strip_indent(&lines[j], fence.indent)));
                    j += 1;
                }
                let after = (end..lines.len())
                    .find(|&k| !lines[k].trim().is_empty())
                    .map(|k| (k + 1, lines[k].trim().to_owned()));
                md.blocks.push(CodeBlock {
                    line: n,
                    end,
                    lang: fence.lang,
                    lines: content,
                    before,
                    after,
                });
                i = end;
                continue;
            }
            if trimmed.is_empty() {
                flush(&mut para, &mut units);
                previous_row = false;
                i += 1;
                continue;
            }
            if trimmed.starts_with("<!--") {
                flush(&mut para, &mut units);
                previous_row = false;
                let mut text = String::new();
                let mut j = i;
                loop {
                    text.push_str(&lines[j]);
                    text.push('\n');
                    if lines[j].contains("-->") || j + 1 == lines.len() {
                        break;
                    }
                    j += 1;
                }
                units.push(Unit {
                    first_line: n,
                    text,
                    kind: UnitKind::Comment,
                });
                i = j + 1;
                continue;
            }
            if let Some(level) = atx_level(line) {
                flush(&mut para, &mut units);
                previous_row = false;
                units.push(Unit {
                    first_line: n,
                    text: line.clone(),
                    kind: UnitKind::Heading(level),
                });
                i += 1;
                continue;
            }
            if is_row {
                flush(&mut para, &mut units);
                if !previous_row {
                    table_header = Some(split_cells(trimmed));
                } else if is_delimiter_row(trimmed) {
                    i += 1;
                    continue;
                }
                previous_row = true;
                units.push(Unit {
                    first_line: n,
                    text: line.clone(),
                    kind: UnitKind::Row(table_header.clone().unwrap_or_default()),
                });
                i += 1;
                continue;
            }
            previous_row = false;
            match &mut para {
                Some(u) => {
                    u.text.push_str(line);
                    u.text.push('\n');
                }
                None => {
                    para = Some(Unit {
                        first_line: n,
                        text: format!("{line}\n"),
                        kind: UnitKind::Paragraph,
                    });
                }
            }
            i += 1;
        }
        flush(&mut para, &mut units);

        let mut slugger = Slugger::default();
        for unit in &units {
            let line_of = |offset: usize| {
                unit.first_line + unit.text[..offset].bytes().filter(|b| *b == b'\n').count()
            };
            if unit.kind == UnitKind::Comment {
                for (k, l) in unit.text.lines().enumerate() {
                    md.prose.push((unit.first_line + k, l.to_owned()));
                    md.comment_lines.insert(unit.first_line + k);
                }
                continue;
            }
            let spans = code_spans(&unit.text);
            let mut masked: Vec<u8> = unit.text.as_bytes().to_vec();
            for s in &spans {
                for b in &mut masked[s.start..s.end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
            }
            // Only ASCII bytes were replaced (by spaces, whole spans), so this stays UTF-8.
            let masked = String::from_utf8_lossy(&masked).into_owned();
            for s in &spans {
                let column = match &unit.kind {
                    UnitKind::Row(header) => {
                        let index = cell_index(&unit.text[..s.start]);
                        index.and_then(|k| header.get(k).cloned())
                    }
                    _ => None,
                };
                md.spans.push(CodeSpan {
                    line: line_of(s.start),
                    text: s.content.clone(),
                    column,
                });
            }
            for (offset, target) in link_targets(&masked) {
                md.links.push(Link {
                    line: line_of(offset),
                    target,
                });
            }
            for id in explicit_anchors(&masked) {
                md.anchors.insert(id);
            }
            for (k, l) in masked.lines().enumerate() {
                md.prose.push((unit.first_line + k, l.to_owned()));
            }
            if let UnitKind::Heading(level) = unit.kind {
                let text = render_inline(heading_text(&unit.text));
                let anchor = slugger.slug(&text);
                md.anchors.insert(anchor.clone());
                md.headings.push(Heading {
                    line: unit.first_line,
                    level,
                    text,
                    anchor,
                });
            }
        }
        md.prose.sort_by_key(|(n, _)| *n);
        md
    }
}

struct Fence {
    ch: char,
    len: usize,
    indent: usize,
    lang: String,
}

fn opening_fence(line: &str) -> Option<Fence> {
    let t = line.trim_start();
    let ch = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = t.chars().take_while(|c| *c == ch).count();
    if len < 3 {
        return None;
    }
    let info = t[len..].trim();
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some(Fence {
        ch,
        len,
        indent: line.len() - t.len(),
        lang: info
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_lowercase(),
    })
}

fn is_closing_fence(line: &str, ch: char, len: usize) -> bool {
    let t = line.trim();
    let run = t.chars().take_while(|c| *c == ch).count();
    run >= len && run == t.chars().count()
}

fn strip_indent(line: &str, indent: usize) -> String {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    line[spaces.min(indent)..].to_owned()
}

fn atx_level(line: &str) -> Option<usize> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let level = t.chars().take_while(|c| *c == '#').count();
    let rest = &t[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
        .then_some(level)
}

/// The heading's inline text: without the `#`s and an optional closing sequence.
fn heading_text(line: &str) -> &str {
    let t = line.trim().trim_start_matches('#').trim();
    let closing = t.trim_end_matches('#');
    if closing.len() < t.len() && (closing.is_empty() || closing.ends_with([' ', '\t'])) {
        closing.trim_end()
    } else {
        t
    }
}

/// The cells of a table row, split at unescaped `|`, trimmed.
fn split_cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cell.push(c);
                if let Some(next) = chars.next() {
                    cell.push(next);
                }
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_owned());
    }
    cells
}

fn is_delimiter_row(row: &str) -> bool {
    let cells = split_cells(row);
    !cells.is_empty()
        && cells.iter().all(|c| {
            let c = c.trim();
            !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')) && c.contains('-')
        })
}

/// Which cell (0-based) the text before a point of a row ends in.
fn cell_index(before: &str) -> Option<usize> {
    let t = before.trim_start();
    let mut pipes = 0usize;
    let mut escaped = false;
    for c in t.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '|' => pipes += 1,
            _ => {}
        }
    }
    if t.starts_with('|') {
        pipes.checked_sub(1)
    } else {
        Some(pipes)
    }
}

struct Span {
    start: usize,
    end: usize,
    content: String,
}

/// The code spans of a paragraph: a run of n backticks up to the next run of exactly n.
fn code_spans(text: &str) -> Vec<Span> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = b[i..].iter().take_while(|c| **c == b'`').count();
        let mut j = i + n;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let m = b[j..].iter().take_while(|c| **c == b'`').count();
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                let raw = text[i + n..j].replace('\n', " ");
                let content = if raw.len() >= 2
                    && raw.starts_with(' ')
                    && raw.ends_with(' ')
                    && !raw.trim().is_empty()
                {
                    raw[1..raw.len() - 1].to_owned()
                } else {
                    raw
                };
                spans.push(Span {
                    start: i,
                    end: j + n,
                    content,
                });
                i = j + n;
            }
            None => i += n,
        }
    }
    spans
}

/// Link destinations in text whose code spans are blanked out, with their byte offsets.
fn link_targets(masked: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = masked[from..].find("](") {
        let start = from + k + 2;
        from = start;
        let rest = &masked[start..];
        let rest_trimmed = rest.trim_start();
        let lead = rest.len() - rest_trimmed.len();
        let target = if let Some(r) = rest_trimmed.strip_prefix('<') {
            r.split('>').next().unwrap_or_default().to_owned()
        } else {
            let mut depth = 0i32;
            let mut end = rest_trimmed.len();
            for (p, c) in rest_trimmed.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = p;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = p;
                        break;
                    }
                    _ => {}
                }
            }
            rest_trimmed[..end].to_owned()
        };
        out.push((start + lead, target));
    }
    // Reference definitions: `[label]: target` at the start of a line.
    let mut offset = 0;
    for line in masked.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[')
            && let Some(close) = rest.find("]:")
            && !rest[..close].contains('[')
            && !rest[..close].is_empty()
        {
            let target = rest[close + 2..]
                .split_whitespace()
                .next()
                .unwrap_or_default();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                out.push((offset, target.to_owned()));
            }
        }
        offset += line.len();
    }
    // HTML.
    for attr in ["href=\"", "src=\"", "href='", "src='"] {
        let quote = if attr.ends_with('"') { '"' } else { '\'' };
        let mut from = 0;
        while let Some(k) = masked[from..].find(attr) {
            let start = from + k + attr.len();
            let end = masked[start..]
                .find(quote)
                .map_or(masked.len(), |e| start + e);
            out.push((start, masked[start..end].to_owned()));
            from = end;
        }
    }
    out.sort_by_key(|(o, _)| *o);
    out
}

/// `id` and `name` of `<a …>` tags.
fn explicit_anchors(masked: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = masked[from..].find("<a ") {
        let start = from + k;
        let end = masked[start..]
            .find('>')
            .map_or(masked.len(), |e| start + e);
        let tag = &masked[start..end];
        for attr in ["id=", "name="] {
            let mut search = 0;
            while let Some(p) = tag[search..].find(attr) {
                let at = search + p;
                search = at + attr.len();
                // `id=` inside `data-id=` or `aria-…` is another attribute.
                if at > 0 && !tag[..at].ends_with([' ', '\t', '\n']) {
                    continue;
                }
                let value = &tag[at + attr.len()..];
                let (quote, value) = match value.chars().next() {
                    Some(q @ ('"' | '\'')) => (q, &value[1..]),
                    _ => (' ', value),
                };
                let v = value.split(quote).next().unwrap_or_default().trim();
                if !v.is_empty() {
                    out.push(v.to_owned());
                }
            }
        }
        from = end;
    }
    out
}

/// Inline Markdown as text: code spans unwrapped, links and images reduced to their text,
/// HTML tags, emphasis asterisks and backslash escapes dropped.
pub fn render_inline(text: &str) -> String {
    let spans = code_spans(text);
    let mut out = String::new();
    let mut i = 0;
    let mut in_tag = false;
    let mut pieces: Vec<(bool, String)> = Vec::new();
    for s in &spans {
        pieces.push((false, text[i..s.start].to_owned()));
        pieces.push((true, s.content.clone()));
        i = s.end;
    }
    pieces.push((false, text[i..].to_owned()));
    for (code, piece) in pieces {
        if code {
            out.push_str(&piece);
            continue;
        }
        let mut chars = piece.chars().peekable();
        let mut link_depth = 0usize;
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(&next) = chars.peek()
                        && next.is_ascii_punctuation()
                    {
                        out.push(next);
                        chars.next();
                    } else {
                        out.push(c);
                    }
                }
                '<' => in_tag = true,
                '>' if in_tag => in_tag = false,
                _ if in_tag => {}
                '*' => {}
                '!' if chars.peek() == Some(&'[') => {}
                '[' => link_depth += 1,
                ']' if link_depth > 0 => {
                    link_depth -= 1;
                    if chars.peek() == Some(&'(') {
                        // Skip the destination.
                        let mut depth = 0;
                        for d in chars.by_ref() {
                            match d {
                                '(' => depth += 1,
                                ')' => {
                                    depth -= 1;
                                    if depth == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                }
                _ => out.push(c),
            }
        }
    }
    out.trim().to_owned()
}

/// GitHub's heading anchors (github-slugger): lowercase; every character but letters,
/// digits, `-`, `_` and spaces dropped; spaces become `-`; a repeat gets `-1`, `-2`, ….
#[derive(Default)]
pub struct Slugger {
    seen: HashMap<String, usize>,
}

impl Slugger {
    pub fn slug(&mut self, text: &str) -> String {
        let base = slug(text);
        let mut candidate = base.clone();
        while self.seen.contains_key(&candidate) {
            let n = self.seen.entry(base.clone()).or_insert(0);
            *n += 1;
            candidate = format!("{base}-{n}");
        }
        self.seen.insert(candidate.clone(), 0);
        candidate
    }
}

/// One heading's anchor, before deduplication.
pub fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The logical lines of a shell code block: blank and comment-only lines dropped, lines ending
/// in `\` joined with the next, each with the line it starts on.
pub fn shell_lines(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in lines {
        let (start, mut text) = match pending.take() {
            Some((start, text)) => (start, text),
            None => {
                let t = line.trim();
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
                (*n, String::new())
            }
        };
        let t = if text.is_empty() {
            line.trim_end()
        } else {
            line.trim()
        };
        if let Some(continued) = t.strip_suffix('\\') {
            text.push_str(continued.trim_end());
            text.push(' ');
            pending = Some((start, text));
        } else {
            text.push_str(t);
            out.push((start, text.trim().to_owned()));
        }
    }
    if let Some((start, text)) = pending {
        out.push((start, text.trim().to_owned()));
    }
    out
}

/// A shell command line split into simple commands (at unquoted `|`, `;`, `&`, `$(`, `)` and
/// backticks), each a list of words; quotes are kept inside their word, and a `#` word and
/// what follows it stay with the command they comment.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            word.push(c);
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                word.push(c);
            }
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                end_word(&mut word, &mut words);
                out.push(std::mem::take(&mut words));
            }
            '|' | ';' | '&' | ')' | '`' => {
                end_word(&mut word, &mut words);
                out.push(std::mem::take(&mut words));
            }
            c if c.is_whitespace() => end_word(&mut word, &mut words),
            _ => word.push(c),
        }
    }
    end_word(&mut word, &mut words);
    out.push(words);
    out.retain(|w| !w.is_empty());
    out
}

/// The long flag a word is or starts with (`--name`, `--name=value`, `[--name`), without the
/// dashes; `--name-*` (any flag with that prefix) keeps its `*`.
pub fn flag_of(word: &str) -> Option<String> {
    let w = word.trim_start_matches(['[', '(', '"', '\'', '{', '<', '`', '|']);
    let rest = w.strip_prefix("--")?;
    if !rest.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return None;
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .collect();
    // `--leader-election-*`: every flag with that prefix.
    if name.ends_with('-') && rest[name.len()..].starts_with('*') {
        return Some(format!("{name}*"));
    }
    let name = name.trim_end_matches(['.', '-']);
    (!name.is_empty()).then(|| name.to_owned())
}

/// Whether a word is shaped like an environment variable name: upper case, digits and `_`,
/// starting with a letter.
pub fn is_env_name(s: &str) -> bool {
    s.len() >= 2
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `$NAME` and `${NAME…}` references in a text.
pub fn env_references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(k) = rest.find('$') {
        rest = &rest[k + 1..];
        let r = rest.strip_prefix('{').unwrap_or(rest);
        let name: String = r
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if is_env_name(&name) {
            out.push(name);
        }
    }
    out
}

/// What a clap binary's `--help` lists.
#[derive(Debug, Default, Clone)]
pub struct Help {
    /// Long flags, without the dashes.
    pub flags: BTreeSet<String>,
    /// Environment variables (`[env: NAME=]`).
    pub envs: BTreeSet<String>,
    /// Subcommands (`help` left out).
    pub subcommands: Vec<String>,
}

impl Help {
    /// Reads the options with [`crate::flags_reference::parse_help`] (the one reader of clap's
    /// help), and the subcommands of a `Commands:` section.
    pub fn parse(text: &str) -> Help {
        let mut help = Help::default();
        for option in crate::flags_reference::parse_help(text) {
            for word in option.usage.split([' ', ',']) {
                if let Some(flag) = flag_of(word) {
                    help.flags.insert(flag);
                }
            }
            help.envs.extend(option.env);
        }
        let mut in_commands = false;
        for line in text.lines() {
            let t = line.trim();
            if t.is_empty() {
                in_commands = false;
            } else if t == "Commands:" {
                in_commands = true;
            } else if in_commands
                && let Some(name) = t.split_whitespace().next()
                && name != "help"
            {
                help.subcommands.push(name.to_owned());
            }
        }
        help
    }
}

/// A metric registration in Rust source: `registry.register("name", "help", metric)` or
/// `register_with_unit("name", "help", Unit::Seconds, metric)`, under the
/// `sub_registry_with_prefix("prefix")` of the same function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The name as served in `# TYPE` (prefix, name and unit joined by `_`; a counter's
    /// `_total` is not part of it).
    pub name: String,
    /// `counter`, `gauge`, `histogram` or `info`, from the metric's expression or the declared
    /// type of the field it clones; `None` when neither says.
    pub kind: Option<String>,
    pub line: usize,
}

/// The metric registrations of a source file, up to its first `#[cfg(test)]` (the tests
/// module, by convention at the end). A call whose first argument is not a string literal (a
/// `register(&mut registry)` helper) is not a registration.
pub fn registrations(source: &str) -> Vec<Registration> {
    let code = source.split("#[cfg(test)]").next().unwrap_or(source);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find(".register") {
        let at = from + k;
        from = at + ".register".len();
        let rest = &code[from..];
        let with_unit = rest.starts_with("_with_unit(");
        let open = if with_unit {
            "_with_unit(".len()
        } else if rest.starts_with('(') {
            1
        } else {
            continue;
        };
        let args = call_arguments(&rest[open..]);
        let Some(name) = args.first().and_then(|a| string_literal(a)) else {
            continue;
        };
        if args.len() < 3 {
            continue;
        }
        let unit = if with_unit {
            args[2]
                .trim()
                .strip_prefix("Unit::")
                .map(|u| u.to_lowercase())
                .filter(|u| u.chars().all(|c| c.is_ascii_alphanumeric()))
        } else {
            None
        };
        let fn_start = code[..at].rfind("fn ").unwrap_or(0);
        let prefix = code[fn_start..at]
            .rfind("sub_registry_with_prefix(")
            .and_then(|p| {
                let args =
                    call_arguments(&code[fn_start + p + "sub_registry_with_prefix(".len()..]);
                args.first().and_then(|a| string_literal(a))
            });
        let full = [prefix, Some(name), unit]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let metric = args.last().map(|a| a.trim()).unwrap_or_default();
        let kind = metric_kind(metric).or_else(|| field_kind(code, metric));
        out.push(Registration {
            name: full,
            kind,
            line: code[..at].matches('\n').count() + 1,
        });
    }
    out
}

/// The top-level arguments of a call, from just after its `(` to its `)`.
fn call_arguments(text: &str) -> Vec<&str> {
    let mut args = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth > 0 => depth -= 1,
            ')' => {
                if !text[start..i].trim().is_empty() {
                    args.push(&text[start..i]);
                }
                return args;
            }
            ',' if depth == 0 => {
                args.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    args
}

fn string_literal(arg: &str) -> Option<String> {
    let t = arg.trim();
    let inner = t.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('"')).then(|| inner.to_owned())
}

/// The metric type a Rust type or expression names (`Family<L, Counter>` is a counter).
pub fn metric_kind(text: &str) -> Option<String> {
    ["Histogram", "Counter", "Gauge", "Info"]
        .into_iter()
        .find(|t| text.contains(t))
        .map(str::to_lowercase)
}

/// The kind of the field an expression like `m.passes.clone()` or `g.0.clone()` reads, from
/// the field's declaration in the same file.
fn field_kind(code: &str, metric: &str) -> Option<String> {
    let path = metric.trim_end_matches(".clone()");
    let field = path.rsplit('.').next()?.trim();
    if field.chars().all(|c| c.is_ascii_digit()) {
        // A tuple struct: `struct G(Family<L, Gauge>);`.
        let mut from = 0;
        while let Some(k) = code[from..].find("struct ") {
            let at = from + k + "struct ".len();
            from = at;
            let decl = code[at..].split([';', '{']).next().unwrap_or_default();
            if decl.contains('(')
                && let Some(kind) = metric_kind(decl)
            {
                return Some(kind);
            }
        }
        return None;
    }
    let needle = format!("{field}:");
    let mut from = 0;
    while let Some(k) = code[from..].find(&needle) {
        let at = from + k;
        from = at + needle.len();
        let word_start = code[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if !word_start || code[from..].starts_with(':') {
            continue;
        }
        // The declared type: up to the end of the line, an `=`, or a `,` outside `<…>`.
        let mut depth = 0usize;
        let declared: String = code[from..]
            .chars()
            .take_while(|c| {
                match c {
                    '<' => depth += 1,
                    '>' => depth = depth.saturating_sub(1),
                    ',' if depth == 0 => return false,
                    '\n' | '=' | '}' | ';' => return false,
                    _ => {}
                }
                true
            })
            .collect();
        if let Some(kind) = metric_kind(&declared) {
            return Some(kind);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        let md = Markdown::parse(
            "x.md",
            "# The scheduler (`placement-scheduler/`)\n\n## Living beside OCM's placement controller\n\n### Flags\n\n### Flags\n\n### Flags\n\n## Flags-1\n\n### `OcmPlacementNoLeader`\n\n## 1,000 × 1,000: a_b — c\n\n<a id=\"custom\"></a>\n",
        );
        let anchors: Vec<&str> = md.headings.iter().map(|h| h.anchor.as_str()).collect();
        assert_eq!(
            anchors,
            [
                "the-scheduler-placement-scheduler",
                "living-beside-ocms-placement-controller",
                "flags",
                "flags-1",
                "flags-2",
                "flags-1-1",
                "ocmplacementnoleader",
                "1000--1000-a_b--c",
            ]
        );
        assert_eq!(md.headings[6].text, "OcmPlacementNoLeader");
        assert!(md.anchors.contains("custom"), "{:?}", md.anchors);
    }

    #[test]
    fn code_spans_cross_lines_and_tables_know_their_columns() {
        let md = Markdown::parse(
            "x.md",
            "Run (`buildah run --isolation\nchroot --network host`) and `` a`b ``.\n\n| flag | environment |\n| --- | --- |\n| `--workers` | `WORKERS` |\n\n```sh\ncargo run -p x -- `not a span`\n```\n",
        );
        let spans: Vec<(usize, &str, Option<&str>)> = md
            .spans
            .iter()
            .map(|s| (s.line, s.text.as_str(), s.column.as_deref()))
            .collect();
        assert_eq!(
            spans,
            [
                (1, "buildah run --isolation chroot --network host", None),
                (2, "a`b", None),
                (6, "--workers", Some("flag")),
                (6, "WORKERS", Some("environment")),
            ]
        );
        assert_eq!(md.blocks.len(), 1);
        assert_eq!(md.blocks[0].lang, "sh");
        assert_eq!(
            md.blocks[0].lines,
            [(9, "cargo run -p x -- `not a span`".to_owned())]
        );
    }

    #[test]
    fn links_outside_code_only() {
        let md = Markdown::parse(
            "x.md",
            "See [a](docs/a.md#x) and ![i](img.png \"t\") and `[no](code.md)`.\n\n[ref]: <b.md>\n\n```md\n[no](block.md)\n```\n<a href=\"c.md\">c</a>\n",
        );
        let links: Vec<(usize, &str)> = md
            .links
            .iter()
            .map(|l| (l.line, l.target.as_str()))
            .collect();
        assert_eq!(
            links,
            [(1, "docs/a.md#x"), (1, "img.png"), (3, "b.md"), (8, "c.md")]
        );
    }

    #[test]
    fn indented_fences_and_the_lines_around_them() {
        let md = Markdown::parse(
            "x.md",
            "1. Step:\n   <!-- not run by the tests: needs a hub -->\n   ```sh\n   kubectl get x \\\n     -A\n   ```\n\n   <!-- output of the command above -->\n",
        );
        let b = &md.blocks[0];
        assert_eq!(
            b.before,
            Some((2, "<!-- not run by the tests: needs a hub -->".into()))
        );
        assert_eq!(
            b.after,
            Some((8, "<!-- output of the command above -->".into()))
        );
        assert_eq!(shell_lines(&b.lines), [(4, "kubectl get x -A".to_owned())]);
    }

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(
            commands("TOKEN=$(kubectl create token u -n a) && curl -H 'a b' x | jq . # note --x"),
            [
                vec!["TOKEN="],
                vec!["kubectl", "create", "token", "u", "-n", "a"],
                vec!["curl", "-H", "'a b'", "x"],
                vec!["jq", ".", "#", "note", "--x"],
            ]
        );
        assert_eq!(flag_of("[--now"), Some("now".into()));
        assert_eq!(flag_of("--leader-elect=false"), Some("leader-elect".into()));
        assert_eq!(
            flag_of("--query.replica-label=r"),
            Some("query.replica-label".into())
        );
        assert_eq!(
            flag_of("--leader-election-*"),
            Some("leader-election-*".into())
        );
        assert_eq!(flag_of("--"), None);
        assert_eq!(flag_of("---"), None);
        assert_eq!(
            env_references("${OCM_PLACEMENT_CACHE:-${XDG_CACHE_HOME:-~/.cache}} $TOKEN $x"),
            ["OCM_PLACEMENT_CACHE", "XDG_CACHE_HOME", "TOKEN"]
        );
    }

    #[test]
    fn help_lists_flags_envs_and_subcommands() {
        let help = Help::parse(
            "About\n\nUsage: x <COMMAND>\n\nCommands:\n  run    Run it\n  help   Print this\n\nOptions:\n  -o, --output <OUTPUT>\n          Where [env: OUT_PUT=] [default: -]\n      --leader-elect[=<LEADER_ELECT>]\n          Elect; `--other` is not a flag here [env: LEADER_ELECT=]\n  -h, --help     Print help\n",
        );
        assert_eq!(help.subcommands, ["run"]);
        assert_eq!(
            help.flags.iter().map(String::as_str).collect::<Vec<_>>(),
            ["help", "leader-elect", "output"]
        );
        assert_eq!(
            help.envs.iter().map(String::as_str).collect::<Vec<_>>(),
            ["LEADER_ELECT", "OUT_PUT"]
        );
    }
    #[test]
    fn registrations_with_prefix_unit_and_declared_kind() {
        let source = r#"
struct Metrics { passes: Counter, queue: Family<L, Gauge>, wait: Counter<f64> }
struct G(Family<LeaseLabel, Gauge>);
impl Metrics {
    fn new(registry: &mut Registry) -> Self {
        let m = Self { passes: Counter::default(), queue: Family::default() };
        let r = registry.sub_registry_with_prefix("addon_manager");
        r.register("passes", "Reconcile passes, (run)", m.passes.clone());
        r.register(
            "queue",
            "Depth",
            m.queue.clone(),
        );
        runner.metrics().register(app.registry());
        m
    }
    fn other(&self, registry: &mut Registry) {
        registry.register_with_unit("wait", "Waited", Unit::Seconds, self.inner.wait.clone());
        registry.register("leader", "Leads", g.0.clone());
        registry.register("inline", "Inline", Histogram::new(buckets()));
    }
}
#[cfg(test)]
mod tests { fn t() { r.register("test_only", "x", Counter::default()); } }
"#;
        let got: Vec<(String, Option<String>)> = registrations(source)
            .into_iter()
            .map(|r| (r.name, r.kind))
            .collect();
        let want: Vec<(String, Option<String>)> = [
            ("addon_manager_passes", "counter"),
            ("addon_manager_queue", "gauge"),
            ("wait_seconds", "counter"),
            ("leader", "gauge"),
            ("inline", "histogram"),
        ]
        .into_iter()
        .map(|(n, k)| (n.to_owned(), Some(k.to_owned())))
        .collect();
        assert_eq!(got, want);
    }
}
