//! File-level traces: reading, errors naming the line, and the round trip of generated workloads.

use blockwell_core::Op;
use blockwell_sim::filetrace::{read_from, read_path, write_path, write_to, FileTraceError};
use blockwell_sim::workload::{FileInfo, FileRequest, Workload};
use blockwell_sim::workloads::generate;
use std::path::Path;

fn read_str(s: &str) -> Result<blockwell_sim::filetrace::FileTrace, FileTraceError> {
    read_from(s.as_bytes(), Path::new("t.csv"))
}

#[test]
fn reads_requests_per_process_with_names_and_sizes() {
    let t = read_str(
        "# a comment\n\
         # file,big.db,1000000,1,3\n\
         time_ns,process,file,offset,size,op\n\
         \n\
         100,7,a.txt,0,4096,R\n\
         200,3,big.db,8192,512,w\n\
         300,7,a.txt,4096,100,read\n\
         400,3,c,10,1,R\n",
    )
    .unwrap();
    let w = &t.workload;
    assert_eq!(w.name, "t.csv");
    assert_eq!(t.file_names, vec!["big.db", "a.txt", "c"]);
    assert_eq!(t.process_ids, vec![3, 7], "processes in ascending number order");
    assert_eq!(w.files[0], FileInfo { size: 1_000_000, writer: 1, dir: 3 }, "declared size kept");
    assert_eq!(w.files[1].size, 4196, "size from the furthest request");
    assert_eq!(w.files[2].size, 11);
    let r = |file, op, offset, len, t| FileRequest { file, op, offset, len, think_ns: 0, at_ns: Some(t) };
    assert_eq!(w.processes[0], vec![r(0, Op::Write, 8192, 512, 200), r(2, Op::Read, 10, 1, 400)]);
    assert_eq!(w.processes[1], vec![r(1, Op::Read, 0, 4096, 100), r(1, Op::Read, 4096, 100, 300)]);
    w.validate().unwrap();
}

#[test]
fn empty_time_is_closed_loop_and_think_column_is_optional() {
    let t = read_str(",0,f,0,10,R,500\n5,0,f,10,10,R\n").unwrap();
    let p = &t.workload.processes[0];
    assert_eq!((p[0].at_ns, p[0].think_ns), (None, 500));
    assert_eq!((p[1].at_ns, p[1].think_ns), (Some(5), 0));
}

#[test]
fn bad_lines_name_file_line_and_field() {
    let cases = [
        ("0,0,f,0,0,R\n", 1, "size"),
        ("# x\n0,0,f,0,10,X\n", 2, "op"),
        ("0,p,f,0,10,R\n", 1, "process"),
        ("0,0,f,-1,10,R\n", 1, "offset"),
        ("0,0,,0,10,R\n", 1, "file"),
        ("0,0,f,0,10\n", 1, "fields"),
        ("time_ns,process,file,offset,size,op\n0,0,f,0,10,R,5\n", 2, "expected 6"),
        ("time_ns,proc,file,offset,size,op\n", 1, "header"),
        ("# file,f\n", 1, "declaration"),
        ("# file,f,big\n", 1, "declared size"),
        ("0,0,f,18446744073709551615,10,R\n", 1, "overflows"),
        ("x,0,f,0,10,R\n", 1, "time_ns"),
    ];
    for (text, line, what) in cases {
        let e = read_str(text).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, FileTraceError::Parse { line: l, .. } if l == line), "{text:?}: {msg}");
        assert!(msg.starts_with(&format!("t.csv:{line}: ")) && msg.contains(what), "{text:?}: {msg}");
    }
    let e = read_path(Path::new("/nonexistent/x.csv")).unwrap_err();
    assert!(matches!(e, FileTraceError::Io { .. }) && e.to_string().contains("/nonexistent/x.csv"), "{e}");
}

#[test]
fn generated_workloads_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for spec in [
        "kernel-read(procs=2,files=40,dirs=4)",
        "random(procs=2,requests=300,write_pct=20)",
        "tac(procs=2,file_mb=1,think_us=3)",
    ] {
        let w = generate(spec).unwrap();
        let path = dir.path().join("w.csv");
        write_path(&path, &w).unwrap();
        let t = read_path(&path).unwrap();
        assert_eq!(t.workload.files, w.files, "{spec}");
        assert_eq!(t.workload.processes, w.processes, "{spec}");
        assert_eq!(t.file_names[1], "1");
        // Writing it again gives the same bytes except the name line.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        write_to(&mut a, &w).unwrap();
        write_to(&mut b, &Workload { name: w.name.clone(), ..t.workload }).unwrap();
        assert_eq!(a, b, "{spec}");
    }
}

#[test]
fn open_loop_round_trip_keeps_writers_dirs_and_empty_files() {
    let w = Workload {
        name: "x".into(),
        files: vec![FileInfo { size: 100, writer: 2, dir: 9 }, FileInfo { size: 0, writer: 0, dir: 0 }],
        processes: vec![vec![FileRequest { file: 0, op: Op::Write, offset: 5, len: 95, think_ns: 0, at_ns: Some(42) }]],
    };
    let mut text = Vec::new();
    write_to(&mut text, &w).unwrap();
    let s = String::from_utf8(text.clone()).unwrap();
    assert!(s.contains("# file,1,0,0,0\n") && s.contains("\n42,0,0,5,95,W\n"), "{s}");
    let back = read_from(&text[..], Path::new("x")).unwrap().workload;
    assert_eq!(back, w);
}

/// The error messages and the per-request size quoted in docs/file-traces.md.
#[test]
fn documented_messages_and_sizes() {
    let e = |s: &str| read_from(s.as_bytes(), Path::new("trace.csv")).unwrap_err().to_string();
    assert_eq!(e("0,0,f,0,0,R"), "trace.csv:1: size: expected a number >= 1, found '0'");
    assert_eq!(e("0,0,f,0,1,X"), "trace.csv:1: op: expected R or W, found 'X'");
    assert_eq!(
        e("time_ns,proc,file,offset,size,op"),
        "trace.csv:1: header: expected 'time_ns,process,file,offset,size,op' or \
         'time_ns,process,file,offset,size,op,think_ns', found 'time_ns,proc,file,offset,size,op'"
    );
    assert_eq!(
        e("time_ns,process,file,offset,size,op\n0,0,f,0,1,R,5"),
        "trace.csv:2: expected 6 comma-separated fields (time_ns,process,file,offset,size,op,think_ns), found 7"
    );
    assert_eq!(std::mem::size_of::<FileRequest>(), 48);
    // The example of the docs reads.
    let t = read_from(
        "# blockwell file trace: an example\n# file,src/main.c,10000,0,0\n# file,data.db,33554432\n\
         time_ns,process,file,offset,size,op,think_ns\n0,0,src/main.c,0,4096,R,0\n\
         120000,0,src/main.c,4096,4096,R,0\n150000,1,data.db,819200,8192,R,0\n200000,1,data.db,8192,4096,W,0\n\
         ,2,notes.txt,0,100,W,5000\n"
            .as_bytes(),
        Path::new("x"),
    )
    .unwrap();
    assert_eq!(t.workload.processes.len(), 3);
    assert_eq!(t.workload.files[1].size, 33_554_432);
}
