import sys

from quotaportal_cli.cli import main

sys.exit(main())
