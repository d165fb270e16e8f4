//! What a simulated container prints: the pod simulator reads a container's `command` and
//! `args` and, when they are simple enough, writes their output into the container's log as
//! the kubelet would serve it. Understood:
//!
//! * `["echo", "a", "b"]`: one line, `a b`;
//! * `["sh", "-c", SCRIPT]` (also `/bin/sh`, `bash`, `ash`, `dash`): a script of `echo`
//!   and `sleep` commands, separated by `;`, `&&` or new lines, with single quotes, double
//!   quotes and backslashes as a shell takes them (`true`, `:` and comments are skipped,
//!   `exit` ends it).
//!
//! Anything else (another program, a variable, a loop, a pipe) is not run: the container
//! prints nothing, rather than something a cluster would not print.

use std::time::Duration;

use serde_json::Value;

/// One thing a simulated container does.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Prints this line.
    Line(String),
    /// Waits this long.
    Sleep(Duration),
}

/// The steps of a container (an item of a Pod's `spec.containers`), if the simulator
/// understands its command.
pub fn steps(container: &Value) -> Option<Vec<Step>> {
    let words = |field: &str| -> Option<Vec<String>> {
        match container.get(field) {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect(),
            Some(_) => None,
        }
    };
    // The image's entrypoint is unknown: only a command given in the Pod is run.
    let mut argv = words("command")?;
    if argv.is_empty() {
        return None;
    }
    argv.extend(words("args")?);
    let program = argv.first()?.rsplit('/').next().unwrap_or("");
    match program {
        "echo" => Some(vec![Step::Line(argv[1..].join(" "))]),
        "sh" | "bash" | "ash" | "dash" if argv.get(1).map(String::as_str) == Some("-c") => {
            shell(argv.get(2)?)
        }
        _ => None,
    }
}

/// The steps of a shell script of `echo` and `sleep` commands.
fn shell(script: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    for command in commands(script)? {
        let Some((name, args)) = command.split_first() else {
            continue;
        };
        match name.as_str() {
            "echo" => steps.push(Step::Line(args.join(" "))),
            "sleep" => {
                let [seconds] = args else { return None };
                let seconds: f64 = seconds.strip_suffix('s').unwrap_or(seconds).parse().ok()?;
                if !seconds.is_finite() || seconds < 0.0 {
                    return None;
                }
                steps.push(Step::Sleep(Duration::from_secs_f64(seconds)));
            }
            "true" | ":" => {}
            "exit" => break,
            _ => return None,
        }
    }
    Some(steps)
}

/// The commands of a script, each as its words after quote removal; `None` for what a
/// shell would expand or treat specially (variables, globs, pipes, redirections...).
fn commands(script: &str) -> Option<Vec<Vec<String>>> {
    let mut commands = vec![Vec::new()];
    // The word being read, and whether one is under way (`''` is a word, empty).
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, commands: &mut Vec<Vec<String>>| {
        if std::mem::take(in_word)
            && let Some(last) = commands.last_mut()
        {
            last.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut commands),
            ';' | '\n' => {
                end_word(&mut word, &mut in_word, &mut commands);
                commands.push(Vec::new());
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                end_word(&mut word, &mut in_word, &mut commands);
                commands.push(Vec::new());
            }
            '#' if !in_word => {
                // A comment, to the end of the line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        commands.push(Vec::new());
                        break;
                    }
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => word.push(c),
                            '\n' => {}
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        '$' | '`' => return None,
                        c => word.push(c),
                    }
                }
            }
            '\\' => match chars.next()? {
                '\n' => {}
                c => {
                    in_word = true;
                    word.push(c);
                }
            },
            '$' | '`' | '|' | '&' | '<' | '>' | '(' | ')' | '{' | '}' | '*' | '?' | '[' | '~' => {
                return None;
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut commands);
    Some(commands)
}

/// How long the steps take (the sum of their sleeps).
pub fn duration(steps: &[Step]) -> Duration {
    steps
        .iter()
        .map(|s| match s {
            Step::Sleep(d) => *d,
            Step::Line(_) => Duration::ZERO,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Step::{Line, Sleep};
    use super::*;

    fn run(container: Value) -> Option<Vec<Step>> {
        steps(&container)
    }

    #[test]
    fn echo_prints_its_arguments_as_one_line() {
        let c = json!({"command": ["/bin/echo"], "args": ["step=1", "loss=0.5"]});
        assert_eq!(run(c), Some(vec![Line("step=1 loss=0.5".into())]));
    }

    #[test]
    fn a_shell_script_of_echo_and_sleep_is_followed() {
        let c = json!({"command": ["sh", "-c"], "args": [
            "echo step=1 'loss=0.5'; sleep 0.5\n# a comment; not a command\necho \"a \\\"quoted\\\" line\" && sleep 1s; true; echo x\\ y; exit 0; echo never"
        ]});
        assert_eq!(
            run(c),
            Some(vec![
                Line("step=1 loss=0.5".into()),
                Sleep(Duration::from_millis(500)),
                Line("a \"quoted\" line".into()),
                Sleep(Duration::from_secs(1)),
                Line("x y".into()),
            ])
        );
    }

    #[test]
    fn what_a_shell_would_expand_or_another_program_is_not_run() {
        for script in [
            "echo $HOME",
            "echo \"$HOME\"",
            "echo a | tee b",
            "echo a > b",
            "python train.py",
            "sleep forever",
            "echo 'unterminated",
            "for i in 1 2; do echo $i; done",
        ] {
            let c = json!({"command": ["sh", "-c", script]});
            assert_eq!(run(c), None, "{script}");
        }
        // No command: the image's entrypoint, unknown.
        assert_eq!(run(json!({"args": ["echo", "a"]})), None);
        assert_eq!(run(json!({"command": ["python", "-c", "print(1)"]})), None);
    }

    #[test]
    fn the_duration_is_the_sum_of_the_sleeps() {
        let steps = [
            Line("a".into()),
            Sleep(Duration::from_millis(300)),
            Sleep(Duration::from_millis(200)),
        ];
        assert_eq!(duration(&steps), Duration::from_millis(500));
    }
}
