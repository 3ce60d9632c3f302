//! `tcgkit images`: load images and their reference closure, report, unload.

use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(paths: &[PathBuf], json: bool) -> Result<ExitCode> {
    let _ = json;
    for p in paths {
        let image = tcgkit_image_core::Image::open(p)?;
        println!("{}", image.name());
    }
    Ok(ExitCode::SUCCESS)
}
