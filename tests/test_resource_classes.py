"""What the program's resource classes cost each registration: pulumi evaluates a resource class's annotations every time
one of its instances is registered (pulumi 3.272.0 `_types.resource_types`, from `resolve_outputs`, not cached), and
importing a provider's service module costs a preview its time whether or not the stack declares anything of it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pulumi

import components

from .helpers import ROOT


def _resource_classes() -> list[type[pulumi.Resource]]:
    found = []
    for info in pkgutil.walk_packages(components.__path__, "components."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, pulumi.Resource) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_no_resource_class_of_the_program_has_annotations_pulumi_would_evaluate_at_each_registration():
    classes = _resource_classes()
    assert len(classes) > 20, "the components' resource classes are found"
    annotated = {f"{cls.__module__}.{cls.__qualname__}": list(inspect.get_annotations(cls)) for cls in classes}
    assert {name: fields for name, fields in annotated.items() if fields} == {}, (
        "declare a resource class's attributes under `if TYPE_CHECKING:` (the type checker reads them; pulumi would "
        "evaluate them, importing what they name, at every registration)"
    )


def test_importing_the_program_loads_no_aws_service_module_until_a_stack_declares_one():
    """The components import pulumi-aws' service modules lazily (its `ec2` alone took 0.3 s to import): a stack on an
    existing cluster declares nothing of AWS and pays for none of them."""
    script = (
        "import sys, components.platform, components.cluster, components.weight_mirror, components.workload_identity\n"
        "print(sorted(m for m in sys.modules if m.startswith('pulumi_aws.') and m.count('.') == 2))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_previewing_an_eks_stack_with_a_weight_mirror_loads_neither_the_ec2_nor_the_s3_module(tmp_path):
    """Prod declares launch templates, an S3 gateway endpoint and the mirror's bucket: registered by their type tokens
    (components/aws_objects.py), so pulumi-aws' `ec2` and `s3` packages (0.45 s of imports) stay unloaded."""
    script = (
        "import os, sys\n"
        "from preview.cli import main\n"
        f"sys.argv = ['preview', '--stack', 'prod', '--out', {str(tmp_path)!r}]\n"
        "code = main()\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith(('pulumi_aws.ec2.', 'pulumi_aws.s3.'))}))\n"
        "sys.stdout.flush()\n"
        "os._exit(code)\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "[]"
