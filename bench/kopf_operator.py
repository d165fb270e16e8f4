# The Python Kopf system of `cargo xtask bench`: the same job as the kopf-rs `minimal`
# example (crates/kopf/examples/minimal.rs): a message on creation, the field on update.
# Run by the harness as: kopf run --standalone -A bench/kopf_operator.py
import kopf


@kopf.on.create('kopfexamples')
def create_fn(**_):
    return {'message': 'hello world'}


@kopf.on.update('kopfexamples')
def update_fn(spec, **_):
    return {'field': spec.get('field')}
