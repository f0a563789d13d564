from gradcalc.cli import main

main()
