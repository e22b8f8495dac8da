import sys

from quotaportal_agent.cli import main

sys.exit(main())
