from pipeline.cli.entry import main

main()
