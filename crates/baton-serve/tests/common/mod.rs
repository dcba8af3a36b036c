pub mod pg;
