//! The atomic replacement, on the real file system of the platform the tests
//! run on; `windows` holds what only Windows can show.

use super::*;

fn temps(dir: &Path) -> Vec<OsString> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name())
                .filter(|n| n.as_encoded_bytes().starts_with(b"."))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_durability_replaces_the_whole_file_and_leaves_no_temp() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.json");
    for (i, d) in [Durability::Rename, Durability::Data, Durability::DataAndDir]
        .into_iter()
        .enumerate()
    {
        let content = format!("{{\"n\":{i}}}\n");
        write_atomic(&path, content.as_bytes(), d).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), content);
        assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
    }
}

#[test]
fn a_failed_rename_changes_nothing_and_removes_the_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("taken");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("inside"), b"x").unwrap();
    let err = write_atomic(&target, b"new", Durability::DataAndDir).unwrap_err();
    assert!(!err.changed());
    assert!(
        err.to_string()
            .starts_with("cannot rename a temporary file over"),
        "{err}"
    );
    assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
    assert!(target.join("inside").exists());
}

#[test]
fn a_missing_directory_is_reported_with_the_temp_path() {
    let err = write_atomic(
        Path::new("/nonexistent/baton-fs/doc"),
        b"x",
        Durability::Data,
    )
    .unwrap_err();
    assert!(!err.changed());
    let text = err.to_string();
    // `/` on unix, `\` on Windows (where `/nonexistent` is on the current drive).
    let temp = Path::new("/nonexistent/baton-fs").join(".doc.baton-tmp-");
    assert!(
        text.starts_with(&format!(
            "cannot create a temporary file '{}",
            temp.display()
        )),
        "{text}"
    );
}

#[test]
fn temp_names_are_hidden_and_keep_no_extension() {
    assert_eq!(
        temp_prefix(Path::new("/a/b.json")),
        OsString::from(".b.json.baton-tmp-")
    );
    let long = "x".repeat(200);
    let p = temp_prefix(Path::new(&long));
    assert_eq!(p.len(), 1 + 160 + 1 + ".baton-tmp-".len());
}

#[test]
fn a_dropped_temp_file_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let t = TempFile::create(dir.path(), OsStr::new(".t.baton-tmp-"), 0o600).unwrap();
    let path = t.path().to_path_buf();
    assert!(path.exists());
    drop(t);
    assert!(!path.exists());
}

const ALL: [Durability; 3] = [Durability::Rename, Durability::Data, Durability::DataAndDir];

/// A reader that opened the old file and reads the rest of it once the
/// replacement returned: it reads the old content whole, and the file then
/// holds the new. On unix (and NTFS on Windows 10 and later) the file is
/// replaced while the reader has it open; where an open file cannot be
/// replaced (wine), the reader closes it after 300 ms and the replacement,
/// retried meanwhile, happens then.
#[test]
fn a_reader_of_the_old_file_reads_it_whole_while_it_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.txt");
    let patience = std::time::Duration::from_millis(if cfg!(unix) { 60_000 } else { 300 });
    for d in ALL {
        fs::write(&path, b"old-old-old\n").unwrap();
        let mut reader = File::open(&path).unwrap();
        let mut start = [0u8; 4];
        io::Read::read_exact(&mut reader, &mut start).unwrap();
        assert_eq!(&start, b"old-");
        let (replaced, told) = std::sync::mpsc::channel::<()>();
        let reading = std::thread::spawn(move || {
            let after_replacement = told.recv_timeout(patience).is_ok();
            let mut rest = String::new();
            io::Read::read_to_string(&mut reader, &mut rest).unwrap();
            (rest, after_replacement)
        });
        write_atomic(&path, b"NEW\n", d).unwrap_or_else(|e| panic!("{d:?}: {e:?}"));
        let _ = replaced.send(());
        let (rest, after_replacement) = reading.join().unwrap();
        assert_eq!(rest, "old-old\n", "{d:?}: the reader read the old file");
        assert_eq!(fs::read(&path).unwrap(), b"NEW\n", "{d:?}");
        assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
        if cfg!(unix) {
            assert!(after_replacement, "{d:?}: replaced while open");
        } else {
            eprintln!("{d:?}: replaced while open: {after_replacement}");
        }
    }
}

#[test]
fn crlf_and_every_byte_are_kept_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.txt");
    let mut bytes = b"line one\r\nline two\r\n\r\nlone cr\rlone lf\n\x1a after ctrl-z\r\n".to_vec();
    bytes.extend(0u8..=255);
    for d in ALL {
        write_atomic(&path, &bytes, d).unwrap();
        assert_eq!(fs::read(&path).unwrap(), bytes, "{d:?}");
    }
    let temp = TempFile::create(dir.path(), &temp_prefix(&path), 0o644).unwrap();
    (&mut temp.file()).write_all(b"a\r\nb\r\n").unwrap();
    temp.persist(&path, Durability::DataAndDir).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"a\r\nb\r\n");
}

#[test]
fn paths_with_spaces_and_non_ascii_names_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("dir with spaces").join("sub dir");
    fs::create_dir_all(&sub).unwrap();
    for name in [
        "my doc.json",
        "état – 文件 😀.json",
        " leading and trailing space .txt",
    ] {
        let path = sub.join(name);
        for d in ALL {
            write_atomic(&path, name.as_bytes(), d).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(fs::read(&path).unwrap(), name.as_bytes());
        }
        let prefix = temp_prefix(&path);
        assert_eq!(prefix, OsString::from(format!(".{name}.baton-tmp-")));
    }
    assert!(temps(&sub).is_empty(), "{:?}", temps(&sub));
    assert_eq!(fs::read_dir(&sub).unwrap().count(), 3);
}

#[test]
fn a_long_name_gets_a_short_temp_name_that_can_be_created() {
    let dir = tempfile::tempdir().unwrap();
    // 200 characters: 210 bytes (unix counts bytes), 200 UTF-16 units
    // (Windows counts units); the cut keeps 160 of them, whole characters.
    let long = "é".repeat(10) + &"x".repeat(190);
    let prefix = temp_prefix(Path::new(&long));
    let temp = TempFile::create(dir.path(), &prefix, 0o600).unwrap();
    let name = temp
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with(&format!(
            ".{}~.baton-tmp-",
            &long[..if cfg!(windows) { 160 + 10 } else { 160 }]
        )),
        "{name}"
    );
}

#[cfg(windows)]
mod windows {
    //! What differs on Windows: drive letters, `\\?\` paths, readers that
    //! do not share for deleting, UTF-16 names.

    use std::fs::OpenOptions;
    use std::os::windows::fs::OpenOptionsExt;
    use std::path::{Component, Prefix};

    use windows_sys::Win32::Storage::FileSystem::FILE_SHARE_READ;

    use super::*;

    #[test]
    fn drive_letter_paths_with_backslashes_slashes_and_the_verbatim_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let abs = std::path::absolute(dir.path()).unwrap();
        let Some(Component::Prefix(prefix)) = abs.components().next() else {
            panic!("no prefix: {abs:?}");
        };
        assert!(matches!(prefix.kind(), Prefix::Disk(_)), "{abs:?}");
        let text = abs.to_str().unwrap().to_owned();
        assert!(text.as_bytes()[1..].starts_with(b":\\"), "{text}");
        fs::create_dir(abs.join("with space")).unwrap();
        let spellings = [
            format!(r"{text}\with space\doc.json"),
            format!("{}/with space/doc.json", text.replace('\\', "/")),
            format!(r"\\?\{text}\with space\doc.json"),
        ];
        for (i, spelling) in spellings.iter().enumerate() {
            for d in ALL {
                let content = format!("{i} {d:?}\r\n");
                write_atomic(Path::new(spelling), content.as_bytes(), d)
                    .unwrap_or_else(|e| panic!("{spelling} {d:?}: {e:?}"));
                let read = fs::read_to_string(abs.join("with space").join("doc.json")).unwrap();
                assert_eq!(read, content, "{spelling}");
            }
        }
        assert!(temps(&abs.join("with space")).is_empty());
    }

    #[test]
    fn a_reader_that_does_not_share_deleting_and_stays_blocks_the_replacement_which_changes_nothing(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.txt");
        fs::write(&path, b"old").unwrap();
        let reader = OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ)
            .open(&path)
            .unwrap();
        for d in ALL {
            let err = write_atomic(&path, b"new", d).unwrap_err();
            assert!(!err.changed(), "{d:?}");
            assert!(
                err.to_string()
                    .starts_with("cannot rename a temporary file over"),
                "{err}"
            );
            assert_eq!(fs::read(&path).unwrap(), b"old");
            assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
        }
        drop(reader);
        write_atomic(&path, b"new", Durability::DataAndDir).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn a_replacement_waits_for_a_reader_that_does_not_share_deleting_to_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.txt");
        for d in ALL {
            fs::write(&path, b"old").unwrap();
            let reader = OpenOptions::new()
                .read(true)
                .share_mode(FILE_SHARE_READ)
                .open(&path)
                .unwrap();
            let start = std::time::Instant::now();
            let closing = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                drop(reader);
            });
            write_atomic(&path, b"new", d).unwrap_or_else(|e| panic!("{d:?}: {e:?}"));
            let waited = start.elapsed();
            closing.join().unwrap();
            assert!(
                waited >= std::time::Duration::from_millis(200),
                "{d:?}: {waited:?}"
            );
            assert_eq!(fs::read(&path).unwrap(), b"new", "{d:?}");
            assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
            eprintln!("{d:?}: waited {waited:?} for the reader");
        }
    }

    #[test]
    fn a_long_name_is_cut_between_characters_never_inside_a_surrogate_pair() {
        // Unit 159 is the first half of 😀's surrogate pair: the cut at 160
        // would split it, so it is one unit shorter.
        let name = "x".repeat(159) + "😀" + &"y".repeat(30);
        let prefix = temp_prefix(Path::new(&name));
        let expected = format!(".{}~.baton-tmp-", "x".repeat(159));
        assert_eq!(prefix, OsString::from(expected));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(&name);
        write_atomic(&path, b"ok", Durability::DataAndDir).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"ok");
    }
}
