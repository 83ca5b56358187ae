"""The oldest releases pyproject.toml admits of the libraries whose lower bounds CI tests: each ``name>=X`` of the
project's dependencies as ``name===X`` (the registry's build of exactly that release; a locally built wheel such as
``2.13.0+cpu`` would not match the registry's torchvision), one per line, for ``pip install -c``."""
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TESTED = ('torch', 'torchvision', 'timm', 'transformers')

with open('pyproject.toml', 'rb') as f:
    dependencies = tomllib.load(f)['project']['dependencies']
pins = [d.replace('>=', '===') for d in dependencies if d.split('>=')[0] in TESTED and '>=' in d]
if len(pins) != len(TESTED):
    sys.exit(f'pyproject.toml gives no lower bound for one of {", ".join(TESTED)}: {pins}')
print('\n'.join(pins))
