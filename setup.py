"""What pyproject.toml cannot say: the migrations shipped inside `bridge`, and the per-event core's extension modules.

The repository keeps its Alembic environment in `migrations/` (the project's layout); a wheel installs it as
`bridge.migrations`, so that nothing but `bridge` and `projections` lands top-level in site-packages, where an
application's own `migrations` package would meet ours. An editable install instead puts the checkout's root on
sys.path as it is, and `bridge.migrate` finds `migrations/` beside `bridge/`. The build backend
(ops/packaging/compiled_wheel.py) says which build this is and gives mypyc's extension modules for a wheel.
"""

from setuptools import find_packages, setup

try:
    from compiled_wheel import editable, extensions  # the build backend, importable while it runs this build
except ImportError:  # setup.py run by hand or by another frontend: a plain-Python build

    def editable() -> bool:
        return False

    def extensions() -> list[object]:
        return []


packages = find_packages(include=["bridge", "bridge.*", "projections", "projections.*"])
package_dir = {"": "."}
package_data = {"projections": ["demo-log4j2.properties"]}
if not editable():
    packages += ["bridge.migrations", "bridge.migrations.versions"]
    package_dir["bridge.migrations"] = "migrations"
    package_data["bridge.migrations"] = ["alembic.ini", "script.py.mako"]

setup(packages=packages, package_dir=package_dir, package_data=package_data, ext_modules=extensions())
