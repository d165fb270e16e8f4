// The attributes go on functions.
#[kopf::on::timer("kopfexamples", interval = 60)]
struct Timer;

fn main() {}
