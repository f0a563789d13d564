from gradcalc.cli.app import main

main()
